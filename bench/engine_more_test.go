package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/bench/internal/timing"
	"github.com/sforge-dev/netiso/internal/testcontainerd"
	"github.com/sforge-dev/netiso/internal/testdocker"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
)

// runtimeLog writes a settings file for sforge-runtime in logDir that
// sends its log there, and returns the file and the log.
func runtimeLog(b *testing.B, logDir, hook string) (config, log string) {
	b.Helper()
	log, config = filepath.Join(logDir, "runtime.log"), filepath.Join(logDir, "runtime.json")
	data, _ := json.Marshal(map[string]string{"log": log, "hook": hook})
	if err := os.WriteFile(config, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return config, log
}

// BenchmarkContainerd: `ctr run --rm` of busybox `true` through
// containerd 1.6, sforge-runtime as the runc binary of the isolated runs
// (as `sforge install --containerd` registers it), plain runc for the
// others.
func BenchmarkContainerd(b *testing.B) {
	hookRequire(b)
	dir := b.TempDir()
	prefix := enginePrefix(b, dir)
	rootfs := busyboxRootfs(b, filepath.Join(dir, "image"), testenv.RequireBinary(b, "busybox"), "true")
	config, log := runtimeLog(b, engineLogDir(b, dir, "root", false), filepath.Join(prefix, "bin", "sforge-hook"))
	d := testcontainerd.StartEnv(b, []string{"SFORGE_RUNTIME_CONFIG=" + config})
	n := 0
	run := func(args ...string) func() error {
		return func() error {
			n++
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			argv := append(append([]string{"run", "--rm"}, args...), "--rootfs", rootfs, fmt.Sprintf("bench-%d", n), "/bin/true")
			if out, err := d.Ctr(ctx, argv...); err != nil {
				return fmt.Errorf("%v\n%s", err, out)
			}
			return nil
		}
	}
	runtime := filepath.Join(prefix, "bin", "sforge-runtime")
	plain := &runContender{name: "containerd, plain (runc)", run: run()}
	engineRuns(b, "ctr run --rm busybox true", []*runContender{plain,
		// Every runtime call through sforge-runtime, none isolated: what
		// the wrapper's own process costs the engine.
		{name: "containerd, sforge-runtime, no allowlist", base: plain, run: run("--runc-binary", runtime)},
		{name: "containerd, isolated (4 entries)", base: plain, log: log, mark: " isolated before start (",
			run: run("--runc-binary", runtime, "--annotation", policy.AnnotationAssignment(hookAnnotation(b, 4)))}})
}

// dockerWithSforge starts a dockerd with prefix's sforge-runtime registered
// as runtime "sforge", its log (returned) and its hooks' under dir.
func dockerWithSforge(b *testing.B, dir, prefix string) (*testdocker.Daemon, string) {
	b.Helper()
	config, log := runtimeLog(b, engineLogDir(b, dir, "root", false), filepath.Join(prefix, "bin", "sforge-hook"))
	d := testdocker.Start(b, testdocker.Options{
		DaemonConfig: map[string]any{"runtimes": map[string]any{"sforge": map[string]any{"path": filepath.Join(prefix, "bin", "sforge-runtime")}}},
		Env:          []string{"SFORGE_RUNTIME_CONFIG=" + config}})
	return d, log
}

// atOnce is how many containers a burst starts together:
// SFORGE_BENCH_AT_ONCE, else 32.
func atOnce() int {
	if v, err := strconv.Atoi(os.Getenv("SFORGE_BENCH_AT_ONCE")); err == nil && v > 0 {
		return v
	}
	return 32
}

// BenchmarkDockerBurst: bursts of `docker run --rm` started together
// through one dockerd 20.10, isolated (runtime sforge, the allowlist) and
// plain (runc), the bursts alternated. Every run must succeed and nothing
// may be left; the figure is each kind's p99 over all its runs.
func BenchmarkDockerBurst(b *testing.B) {
	hookRequire(b)
	dir := b.TempDir()
	prefix := enginePrefix(b, dir)
	rootfs := busyboxRootfs(b, filepath.Join(dir, "image"), testenv.RequireBinary(b, "busybox"), "true")
	const image = "sforge-bench/busybox:1"
	d, log := dockerWithSforge(b, dir, prefix)
	d.ImportImage(b, image, rootfs)
	allow := policy.EnvVar + "=" + hookAnnotation(b, 4)
	kinds := []struct {
		name string
		args []string
	}{
		{"plain (runc)", []string{"--runtime", "runc"}},
		{"isolated (4 entries)", []string{"--runtime", "sforge", "-e", allow}},
	}
	n, bursts := atOnce(), rounds(5)
	samples := make([]timing.Samples, len(kinds))
	walls := make([]timing.Samples, len(kinds))
	start := time.Now()
	for range b.N {
		for burst := range bursts {
			for k := range kinds {
				kind := (k + burst) % len(kinds)
				times, wall, errs := burstRun(n, func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					defer cancel()
					args := append(append([]string{"run", "--rm", "--cap-drop", "NET_RAW"}, kinds[kind].args...), image, "/bin/true")
					if out, err := d.Docker(ctx, args...); err != nil {
						return fmt.Errorf("%v: %s", err, out)
					}
					return nil
				})
				for _, err := range errs {
					b.Errorf("%s, burst %d: %v", kinds[kind].name, burst, err)
				}
				if len(errs) > 0 {
					b.FailNow()
				}
				samples[kind] = append(samples[kind], times...)
				walls[kind] = append(walls[kind], wall)
			}
		}
	}
	elapsed := time.Since(start)
	if left := strings.TrimSpace(d.MustDocker(b, "ps", "-aq")); left != "" {
		b.Fatalf("containers left behind:\n%s", left)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		b.Fatal(err)
	}
	if got, want := strings.Count(string(data), " isolated before start ("), n*bursts*b.N; got != want {
		b.Fatalf("%d of %d isolated runs logged an install:\n%s", got, want, data)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\ndocker run --rm busybox true, %d bursts of %d at once per kind, alternated, in %s; load average %s\n", bursts, n, elapsed.Round(time.Second), loadAvg())
	fmt.Fprintf(&out, "ms per run over all runs of a kind (p50 / p99), and each burst's wall time (median)\n")
	fmt.Fprintf(&out, "%-24s %10s %10s %12s\n", "kind", "p50", "p99", "burst wall")
	for k, kind := range kinds {
		fmt.Fprintf(&out, "%-24s %10s %10s %12s\n", kind.name, timing.Ms(samples[k].Median()), timing.Ms(samples[k].Quantile(0.99)), timing.Ms(walls[k].Median()))
	}
	ratio := float64(samples[1].Quantile(0.99)) / float64(samples[0].Quantile(0.99))
	fmt.Fprintf(&out, "p99 isolated / p99 plain: %.2fx; failures: 0; containers left: 0\n", ratio)
	fmt.Print(out.String())
	b.ReportMetric(ratio, "p99-isolated/plain")
}

// burstRun starts n runs of f at once and returns each one's duration, the
// burst's wall time and the errors.
func burstRun(n int, f func() error) (timing.Samples, time.Duration, []error) {
	times := make(timing.Samples, n)
	t0 := time.Now()
	errs := testenv.AtOnce(n, func(i int) error {
		start := time.Now()
		err := f()
		times[i] = time.Since(start)
		return err
	})
	wall := time.Since(t0)
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	return times, wall, failed
}

// BenchmarkSforgeRun: `sforge run` end to end (task, image, container,
// logs, exit, cleanup) of examples/hello-judge with `--agent command --
// /bin/true`, --disable-internet against --enable-internet, through one
// dockerd with the sforge runtime registered.
func BenchmarkSforgeRun(b *testing.B) {
	hookRequire(b)
	dir := b.TempDir()
	prefix := enginePrefix(b, dir)
	busybox := testenv.RequireBinary(b, "busybox")
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		b.Fatal(err)
	}
	var applets []string
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			applets = append(applets, a)
		}
	}
	rootfs := busyboxRootfs(b, filepath.Join(dir, "image"), busybox, applets...)
	d, log := dockerWithSforge(b, dir, prefix)
	d.ImportImage(b, "sforge-example/busybox:1", rootfs) // the example task's base
	task, err := filepath.Abs(filepath.Join("..", "examples", "hello-judge"))
	if err != nil {
		b.Fatal(err)
	}
	xdg := b.TempDir()
	// phases are each run's timings_ms from --report, by flag.
	phases := map[string]map[string]timing.Samples{}
	run := func(flag string) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			report := filepath.Join(dir, "report.json")
			// The audit log the runtime writes (beside its log), where
			// sforge run reads the container's record.
			cmd := exec.CommandContext(ctx, filepath.Join(prefix, "bin", "sforge"), "run", "--task", task, "--agent", "command",
				"--judge-url", "http://198.51.100.10:8080", flag, "--report", report, "--audit-log", filepath.Join(filepath.Dir(log), "audit.jsonl"),
				"--", "/bin/true")
			cmd.Env = append(os.Environ(), "DOCKER_HOST="+d.Host, "XDG_CONFIG_HOME="+xdg)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%v\n%s", err, out)
			}
			var rep struct {
				Timings      map[string]float64 `json:"timings_ms"`
				Isolated     bool               `json:"isolated"`
				BlockedError string             `json:"blocked_error"`
				NamesTotal   *uint64            `json:"blocked_names_total"`
			}
			data, err := os.ReadFile(report)
			if err != nil || json.Unmarshal(data, &rep) != nil {
				return fmt.Errorf("no report: %v %s", err, data)
			}
			// A run whose record never came measures the wait for it.
			if rep.Isolated && (rep.BlockedError != "" || rep.NamesTotal == nil) {
				return fmt.Errorf("no audit record with the resolver's names in the report: %s", data)
			}
			if phases[flag] == nil {
				phases[flag] = map[string]timing.Samples{}
			}
			for k, v := range rep.Timings {
				phases[flag][k] = append(phases[flag][k], time.Duration(v*float64(time.Millisecond)))
			}
			return nil
		}
	}
	plain := &runContender{name: "sforge run --enable-internet", run: run("--enable-internet")}
	// Isolated with the container's own resolver: the hooks install.
	isolated := &runContender{name: "sforge run --disable-internet", base: plain, log: log, mark: " isolation hooks added (", run: run("--disable-internet")}
	// The first runs build the task's image; the rounds measure starts.
	for _, c := range []*runContender{plain, isolated} {
		if err := c.run(); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
	}
	if err := os.Truncate(log, 0); err != nil {
		b.Fatal(err)
	}
	clear(phases) // the image builds
	engineRuns(b, "sforge run examples/hello-judge --agent command -- /bin/true", []*runContender{plain, isolated})
	var out strings.Builder
	fmt.Fprintf(&out, "phases (--report timings_ms), median ms:\n%-22s", "")
	names := []string{"preflight", "resolve", "build", "start", "run", "cleanup", "total"}
	for _, n := range names {
		fmt.Fprintf(&out, " %9s", n)
	}
	for _, flag := range []string{"--enable-internet", "--disable-internet"} {
		fmt.Fprintf(&out, "\n%-22s", flag)
		for _, n := range names {
			fmt.Fprintf(&out, " %9s", timing.Ms(phases[flag][n].Median()))
		}
	}
	fmt.Println(out.String())
}

// BenchmarkRuntimeCall: one call of sforge-runtime that passes through
// (`state x`, the runtime /bin/true), against /bin/true itself and a Go
// program that only execs it (bench/cmd/exec-true), interleaved: what
// each runtime call an engine makes pays for the wrapper.
func BenchmarkRuntimeCall(b *testing.B) {
	dir := b.TempDir()
	floor, runtime := filepath.Join(dir, "exec-true"), filepath.Join(dir, "sforge-runtime")
	build(b, floor, "./cmd/exec-true", "")
	build(b, runtime, "../cmd/sforge-runtime", "")
	config := filepath.Join(dir, "runtime.json")
	if err := os.WriteFile(config, []byte(`{"log": "-"}`), 0o644); err != nil {
		b.Fatal(err)
	}
	contenders := []struct {
		name string
		argv []string
	}{
		{"/bin/true", []string{"/bin/true"}},
		{"Go program execing /bin/true", []string{floor}},
		{"sforge-runtime state x, passing through", []string{runtime, "state", "x"}},
	}
	env := append(os.Environ(), "SFORGE_RUNC=/bin/true", "SFORGE_RUNTIME_CONFIG="+config)
	n := rounds(300)
	for range b.N {
		s := hookInterleave(len(contenders), n, func(c, _ int) time.Duration {
			cmd := exec.Command(contenders[c].argv[0], contenders[c].argv[1:]...)
			cmd.Env = env
			start := time.Now()
			out, err := cmd.CombinedOutput()
			d := time.Since(start)
			if err != nil {
				b.Fatalf("%s: %v: %s", contenders[c].name, err, out)
			}
			return d
		})
		fmt.Printf("\nprocess start to exit, %d rounds interleaved; ms median / p95\n", n)
		for i, c := range contenders {
			fmt.Printf("%-42s %7s / %7s\n", c.name, timing.Ms(s[i].Median()), timing.Ms(s[i].P95()))
		}
	}
}
