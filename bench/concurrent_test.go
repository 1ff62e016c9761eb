package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sforge-dev/netiso/bench/internal/lifecycle"
	"github.com/sforge-dev/netiso/bench/internal/timing"
	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/engine/priority"
	"github.com/sforge-dev/netiso/internal/testdocker"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
	sforgeshim "github.com/sforge-dev/netiso/shim"
)

// Concurrency benchmark (issue 9): 32 isolated containers started at once
// through sforge-runtime (nftables, 4 entries), with real runc (Docker
// 20.10's spec, each container in a namespace of its own, and all of them
// in one namespace by path, as in a pod), and through a private dockerd
// with the runtime registered. Every container must start isolated; the
// isolation time of each (the install the shim logs) is summarised as p50
// and p99, with the p99/p50 ratio the issue bounds; no table may be left.
//
// The controls scenario puts the front's install beside windows that do
// nothing but burn CPU time, at the same point of the same creates, burst
// by burst in turn (concurrentControls): what the host's scheduler alone
// does to a window of that length when 32 creates share the CPUs.

// concurrentContainers is how many start at once: the 32, or
// SFORGE_BENCH_AT_ONCE (a diagnostic: as many as the host has CPUs shows
// the install without the run queue of an oversubscribed host).
var concurrentContainers = atOnce()

func atOnce() int {
	if v, err := strconv.Atoi(os.Getenv("SFORGE_BENCH_AT_ONCE")); err == nil && v > 0 {
		return v
	}
	return 32
}

// hookCPURe reads the CPU time the hook's C front logs with an install,
// hookSwitchesRe its thread's context switches (voluntary/involuntary).
var (
	hookCPURe      = regexp.MustCompile(` cpu=(\S+) `)
	hookSwitchesRe = regexp.MustCompile(` switches=(\d+)/(\d+) `)
)

// queuedRe reads the time an install spent runnable but waiting for a
// CPU, as the kernel counts it. The C fronts read it inside the span their
// install time covers, so the one less the other is the install's own
// time; the Go shim reads it around its engine's timing, not inside.
var queuedRe = regexp.MustCompile(` queued=(\S+) `)

const (
	dockerScenario = "dockerd 20.10, --runtime sforge"
	hooksScenario  = "runc + sforge-hook (hooks.d)"
)

// burst starts n functions at once (after all are ready) and returns their
// durations and errors.
func burst(n int, f func(i int) error) ([]time.Duration, []error) {
	ds, errs := make([]time.Duration, n), make([]error, n)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			start := time.Now()
			errs[i] = f(i)
			ds[i] = time.Since(start)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	return ds, errs
}

// runcBursts creates the bundles' containers through rt all at once, then
// starts, waits for and deletes them all at once (the poststop hooks of a
// shared namespace run concurrently), bursts times. It counts starts and
// failures in res and returns the ids of the containers created.
func runcBursts(b *testing.B, rt *lifecycle.Runtime, bundles []*lifecycle.Bundle, prefix string, bursts int, res *concurrentResult) []string {
	var ids []string
	for round := range bursts {
		for _, bd := range bundles {
			if err := bd.Reset(); err != nil {
				b.Fatal(err)
			}
		}
		id := func(i int) string { return fmt.Sprintf("%s-%d-%d", prefix, round, i) }
		pid := func(i int) string { return filepath.Join(bundles[i].Dir, id(i)+".pid") }
		ds, errs := burst(len(bundles), func(i int) error { return rt.Create(bundles[i], id(i), pid(i)) })
		for i, err := range errs {
			res.started++
			if err != nil {
				res.failures++
				b.Errorf("%s: %v", id(i), err)
				continue
			}
			res.start = append(res.start, ds[i])
			ids = append(ids, id(i))
		}
		_, errs = burst(len(bundles), func(i int) error {
			if errs[i] != nil {
				return nil
			}
			p, err := lifecycle.ReadPID(pid(i))
			if err != nil {
				return err
			}
			if err := rt.Start(id(i)); err != nil {
				return err
			}
			if err := lifecycle.WaitExit(p); err != nil {
				return err
			}
			return rt.Delete(id(i))
		})
		for i, err := range errs {
			if err != nil {
				b.Errorf("%s: %v", id(i), err)
			}
		}
	}
	return ids
}

// concurrentResult is one scenario's summary.
type concurrentResult struct {
	name              string
	started, failures int
	start, isolation  timing.Samples
	cpu               timing.Samples // the install's CPU time
	// own is each install's wall time less its wait on the run queue
	// (read inside that span): its work and any wait of its own (a lock,
	// the kernel), without the host's queue for a CPU. Only for installs
	// by a C front, and empty unless every install was.
	own timing.Samples
	// unaccounted counts the installs whose wall time exceeds their CPU
	// time and run-queue wait by more than 0.3 ms although their thread
	// never slept (no voluntary switch): time the guest kernel did not
	// see the thread run or wait, which on a virtual machine is the vCPU
	// not running.
	unaccounted int
	// waited and preempted count the installs during which the
	// installing thread (the shim's, or the hook's C front) waited (a
	// voluntary context switch) or was preempted (an involuntary one), as
	// its log says; moved, those the Go runtime moved to another thread.
	waited, preempted, moved int
	// realtime counts the installs whose window ran at real-time
	// priority, as their log lines say (priority=realtime).
	realtime int
	leftover string
	note     string // the hook's: how many installs its C front made
}

func (r concurrentResult) String() string {
	ratio := 0.0
	if r.isolation.Median() > 0 {
		ratio = float64(r.isolation.Quantile(0.99)) / float64(r.isolation.Median())
	}
	cpuRatio := 0.0
	if r.cpu.Median() > 0 {
		cpuRatio = float64(r.cpu.Quantile(0.99)) / float64(r.cpu.Median())
	}
	q := func(s timing.Samples) string {
		return fmt.Sprintf("%s %s %s %s %s", timing.Ms(s.Median()), timing.Ms(s.Quantile(0.75)), timing.Ms(s.Quantile(0.9)), timing.Ms(s.Quantile(0.99)), timing.Ms(s.Quantile(1)))
	}
	head := fmt.Sprintf("%-34s %4d %4d  start %s\n%43s isolation wall %s (p99/p50 %.2fx)\n", r.name, r.started, r.failures, q(r.start), "", q(r.isolation), ratio)
	if sh := shareOfStart(r.isolation, r.start); sh != "" {
		head += fmt.Sprintf("%43s %s\n", "", sh)
	}
	if len(r.own) > 0 && len(r.own) == len(r.isolation) {
		head += fmt.Sprintf("%43s isolation less run-queue wait %s (p99/p50 %.2fx); not CPU, not queued, no sleep: %d\n", "", q(r.own),
			float64(r.own.Quantile(0.99))/float64(max(1, r.own.Median())), r.unaccounted)
	}
	if d := delayedByCPU(r.isolation, r.cpu); d != "" {
		head += fmt.Sprintf("%43s %s\n", "", d)
	}
	out := head + fmt.Sprintf("%43s isolation cpu  %s (p99/p50 %.2fx); tables left: %s\n%43s installs that waited %d, were preempted %d (of %d), moved %d; at real-time priority %d",
		"", q(r.cpu), cpuRatio, orNone(r.leftover), "", r.waited, r.preempted, len(r.isolation), r.moved, r.realtime)
	if r.note != "" {
		out += fmt.Sprintf("\n%43s %s", "", r.note)
	}
	return out
}

// delayedByCPU tells, for the installs grouped by their CPU time, how
// many were delayed inside their window (wall time more than 0.3 ms over
// CPU time: preempted, or waiting): the scheduler protects a task it has
// just picked from others' wake-ups for about one base slice, so whether
// an install is cut follows its length (BENCHMARKS.md, "Ninth round").
// wall and cpu are the same installs in the same order; "" otherwise.
func delayedByCPU(wall, cpu timing.Samples) string {
	if len(wall) != len(cpu) || len(cpu) == 0 {
		return ""
	}
	bounds := []time.Duration{500 * time.Microsecond, 750 * time.Microsecond, time.Millisecond, 1500 * time.Microsecond}
	n, delayed := make([]int, len(bounds)+1), make([]int, len(bounds)+1)
	for i := range cpu {
		b := len(bounds)
		for j, bound := range bounds {
			if cpu[i] <= bound {
				b = j
				break
			}
		}
		n[b]++
		if wall[i]-cpu[i] > 300*time.Microsecond {
			delayed[b]++
		}
	}
	var out strings.Builder
	out.WriteString("delayed in their window, by CPU time:")
	ms := func(d time.Duration) string { return fmt.Sprintf("%g", float64(d)/float64(time.Millisecond)) }
	for b := range n {
		label := "> " + ms(bounds[len(bounds)-1])
		if b < len(bounds) {
			label = "<= " + ms(bounds[b])
		}
		fmt.Fprintf(&out, " %s ms %d/%d;", label, delayed[b], n[b])
	}
	return strings.TrimSuffix(out.String(), ";")
}

// shareOfStart puts the isolation time beside what the user waits for,
// the start it is part of (the create that runs the shim's install or
// the hook, or docker run): all installs' wall time over all starts', and
// the slowest installs (p99) against the median start. Under 32 creates on
// a few cores the start takes seconds; whatever the install's own p99/p50,
// this says what it adds. "" without samples.
func shareOfStart(isolation, start timing.Samples) string {
	if len(isolation) == 0 || len(start) == 0 || start.Median() == 0 {
		return ""
	}
	var iso, st time.Duration
	for _, d := range isolation {
		iso += d
	}
	for _, d := range start {
		st += d
	}
	return fmt.Sprintf("isolation in the start: %.2f%% of all starts' wall time; p99 isolation / p50 start %.2f%%",
		100*float64(iso)/float64(st), 100*float64(isolation.Quantile(0.99))/float64(start.Median()))
}

// unaccountedGap is the least wall time over CPU time and run-queue wait
// that counts an install as unaccounted (concurrentResult.unaccounted).
const unaccountedGap = 300 * time.Microsecond

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// priorityRe reads the container and the install window's priority from
// a runtime front's line ("container ID: isolated before start (...
// priority=P ...") or a hook front's ("install container=ID ...
// priority=P front=c").
var priorityRe = regexp.MustCompile(`container[ =]([^\s:]+).* priority=(realtime|normal) `)

// realtimeInstalls counts, among the ids, the installs that the log says
// ran at real-time priority.
func realtimeInstalls(tb testing.TB, log string, ids []string) int {
	b, err := os.ReadFile(log)
	if err != nil {
		tb.Fatal(err)
	}
	rt := map[string]bool{}
	for _, m := range priorityRe.FindAllStringSubmatch(string(b), -1) {
		rt[m[1]] = m[2] == "realtime"
	}
	n := 0
	for _, id := range ids {
		if rt[id] {
			n++
		}
	}
	return n
}

var shimSwitchesRe = regexp.MustCompile(`container (\S+): (?:isolated before start|control window) \(.* switches=(\S+) `)

// shimSwitches counts, among the ids, the installs during which the shim
// waited (voluntary context switches) and was preempted (involuntary).
func shimSwitches(tb testing.TB, log string, ids []string) (waited, preempted, moved int) {
	b, err := os.ReadFile(log)
	if err != nil {
		tb.Fatal(err)
	}
	got := map[string][3]bool{}
	for _, m := range shimSwitchesRe.FindAllStringSubmatch(string(b), -1) {
		v, i, ok := strings.Cut(m[2], "/")
		got[m[1]] = [3]bool{v != "0", i != "0", !ok}
	}
	for _, id := range ids {
		switch g := got[id]; {
		case g[2]:
			moved++
		default:
			if g[0] {
				waited++
			}
			if g[1] {
				preempted++
			}
		}
	}
	return waited, preempted, moved
}

// shimInstallTimes reads the install time (wall and CPU) of each container
// id from a shim log, and for the C front's installs their own time (the
// install time less the wait on the run queue) and how many of them are
// unaccounted (concurrentResult.unaccounted).
func shimInstallTimes(tb testing.TB, log string, ids []string) (wall, cpu, own timing.Samples, unaccounted int) {
	b, err := os.ReadFile(log)
	if err != nil {
		tb.Fatal(err)
	}
	got, ownOf, gap := map[string][2]time.Duration{}, map[string]time.Duration{}, map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		m := shimInstallRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		w, err1 := time.ParseDuration(m[2])
		c, err2 := time.ParseDuration(m[3])
		if err1 != nil || err2 != nil {
			tb.Fatalf("%q: %v %v", m[0], err1, err2)
		}
		got[m[1]] = [2]time.Duration{w, c}
		if q := queuedRe.FindStringSubmatch(line); q != nil && strings.Contains(line, " front=c)") {
			qd, err := time.ParseDuration(q[1])
			if err != nil {
				tb.Fatalf("%q: %v", line, err)
			}
			ownOf[m[1]] = w - qd
			sw := shimSwitchesRe.FindStringSubmatch(line)
			gap[m[1]] = w-c-qd > unaccountedGap && sw != nil && strings.HasPrefix(sw[2], "0/")
		}
	}
	for _, id := range ids {
		d, ok := got[id]
		if !ok {
			tb.Fatalf("container %s: no isolation logged in %s", id, log)
		}
		wall, cpu = append(wall, d[0]), append(cpu, d[1])
		if o, ok := ownOf[id]; ok {
			own = append(own, o)
		}
		if gap[id] {
			unaccounted++
		}
	}
	return wall, cpu, own, unaccounted
}

// ownSessionEnv=1 runs each runc-scenario create in a session of its own
// (lifecycle.Runtime.OwnSession): a diagnostic of how much of the tail is
// the scheduling group the burst shares, not the measure of the target.
const ownSessionEnv = "SFORGE_BENCH_OWN_SESSION"

func ownSessions(tb testing.TB) bool {
	switch v := os.Getenv(ownSessionEnv); v {
	case "", "0":
		return false
	case "1":
		return true
	default:
		tb.Fatalf("%s=%q: want 1 (each create in its own session) or 0", ownSessionEnv, v)
		return false
	}
}

func BenchmarkConcurrentStarts(b *testing.B) {
	hookRequire(b)
	if err := lifecycle.SetSubreaper(); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	shimBin, hookBin := filepath.Join(dir, "sforge-runtime"), filepath.Join(dir, "sforge-hook")
	build(b, shimBin, "../cmd/sforge-runtime", "")
	build(b, hookBin, "../cmd/sforge-hook", "")
	runc := testenv.RequireBinary(b, "runc")
	busybox := testenv.RequireBinary(b, "busybox")
	allow := policy.EnvVar + "=" + hookAnnotation(b, 4)
	bursts := rounds(5)
	host := hostHooks(b)
	ownSession := ownSessions(b)
	// SFORGE_BENCH_ONLY=<regexp> keeps the scenarios whose name matches.
	keep := func(string) bool { return true }
	if only := os.Getenv("SFORGE_BENCH_ONLY"); only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			b.Fatalf("SFORGE_BENCH_ONLY: %v", err)
		}
		keep = re.MatchString
	}

	var results []concurrentResult
	for k, sc := range []struct {
		name   string
		shared bool
		drop   []string
		normal bool // SFORGE_INSTALL_PRIORITY=normal: the baseline of the real-time window
	}{
		{"runc, private netns each", false, nil, false},
		{"runc, private netns, normal priority", false, nil, true},
		// As `sforge run` launches them: the C front's isolated create.
		{"runc, private netns, no NET_RAW", false, []string{"CAP_NET_RAW"}, false},
		{"runc, one netns by path for all", true, nil, false},
	} {
		name, shared := sc.name, sc.shared
		if !keep(name) {
			continue
		}
		netns := ""
		if shared {
			netns = testenv.NewNetNS(b).Path()
		}
		rt, log, bundles := shimScenario(b, dir, fmt.Sprint(k), shimBin, hookBin, runc, busybox, allow, netns, sc.drop)
		rt.OwnSession = ownSession
		if sc.normal {
			rt.Env = append(rt.Env, priority.EnvVar+"="+priority.Normal)
		}
		res := concurrentResult{name: name}
		ids := runcBursts(b, rt, bundles, fmt.Sprintf("cc-%d", k), bursts, &res)
		res.isolation, res.cpu, res.own, res.unaccounted = shimInstallTimes(b, log, ids)
		res.waited, res.preempted, res.moved = shimSwitches(b, log, ids)
		res.realtime = realtimeInstalls(b, log, ids)
		if data, _ := os.ReadFile(log); sc.drop != nil && strings.Count(string(data), " front=c)") != len(ids) {
			b.Fatalf("%s: %d of %d installs by the C front", name, strings.Count(string(data), " front=c)"), len(ids))
		}
		if shared {
			n, err := nsFromPath(netns)
			if err != nil {
				b.Fatal(err)
			}
			res.leftover = nftTables(b, n)
			n.Close()
		}
		results = append(results, res)
	}
	if keep(controlsScenario) {
		results = append(results, concurrentControls(b, dir, shimBin, hookBin, runc, busybox, allow, bursts, controlSpins(b), ownSession)...)
	}
	if keep(hooksScenario) {
		results = append(results, concurrentHooks(b, dir, hookBin, runc, busybox, bursts, ownSession))
	}
	if keep(dockerScenario) {
		results = append(results, concurrentDocker(b, dir, shimBin, hookBin, runc, busybox, allow, max(1, bursts/2)))
	}

	keepLogs(b, dir)

	var out strings.Builder
	fmt.Fprintf(&out, "\n%d isolated containers started at once (nftables, 4 entries), %d bursts (%d for dockerd); load average %s\n", concurrentContainers, bursts, max(1, bursts/2), loadAvg())
	fmt.Fprintf(&out, "host: %s\n", host)
	if ownSession {
		fmt.Fprintf(&out, "%s=1: each runc create (and the front or hook it runs) in a session, so a scheduling group, of its own\n", ownSessionEnv)
	}
	fmt.Fprintf(&out, "start = runtime create (runc) or docker run -d (dockerd), wall time; isolation = the install the shim or hook logs; ms p50 / p99\n")
	fmt.Fprintf(&out, "%-34s %4s %4s  quantiles p50 p75 p90 p99 max (ms)\n", "scenario", "n", "fail")
	for _, r := range results {
		fmt.Fprintln(&out, r.String())
	}
	if sum := controlsSummary(results); sum != "" {
		fmt.Fprintf(&out, "\n%s\n", sum)
	}
	fmt.Print(out.String())
	for _, r := range results {
		if r.failures > 0 || r.leftover != "" {
			b.Fatalf("%s: %d failures, tables left: %s", r.name, r.failures, orNone(r.leftover))
		}
	}
}

// keepLogs copies the runtimes' and hooks' logs in dir to the directory
// SFORGE_BENCH_KEEP_LOGS names, if any, for a look at each install's line.
func keepLogs(b *testing.B, dir string) {
	keep := os.Getenv("SFORGE_BENCH_KEEP_LOGS")
	if keep == "" {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err == nil {
			err = os.WriteFile(filepath.Join(keep, filepath.Base(l)), data, 0o644)
		}
		if err != nil {
			b.Errorf("%s: %v", keep, err)
		}
	}
}

// shimScenario makes what one scenario of runc creates through
// sforge-runtime needs (its config, key naming its files): the runtime, its
// log, and 32 bundles of Docker's spec with the allowlist, in netns ("" a
// namespace of their own each), with the capabilities in drop dropped.
func shimScenario(b *testing.B, dir, key, shimBin, hookBin, runc, busybox, allow, netns string, drop []string) (*lifecycle.Runtime, string, []*lifecycle.Bundle) {
	b.Helper()
	log := filepath.Join(dir, "runtime-"+key+".log")
	cfg := filepath.Join(dir, "runtime-"+key+".json")
	data, _ := json.Marshal(map[string]string{"runtime": runc, "hook": hookBin, "log": log, "engine": engines.Auto})
	if err := os.WriteFile(cfg, data, 0o644); err != nil {
		b.Fatal(err)
	}
	// SFORGE_HOOK_LOG: the poststop hook the shim adds for a shared
	// namespace logs there, not to the host's /var/log/sforge.
	hookLog := filepath.Join(dir, "hook-"+key+".log")
	rt := &lifecycle.Runtime{Binary: shimBin, Root: filepath.Join(dir, "root-"+key),
		Env: append(cleanEnv(), "SFORGE_RUNTIME_CONFIG="+cfg, sforgeshim.HookLogEnv+"="+hookLog)}
	return rt, log, dockerBundles(b, dir, key, busybox, allow, netns, drop)
}

// dockerBundles makes 32 bundles of Docker 20.10's spec with the
// allowlist in their environment (see shimScenario).
func dockerBundles(b *testing.B, dir, key, busybox, allow, netns string, drop []string) []*lifecycle.Bundle {
	b.Helper()
	bundles := make([]*lifecycle.Bundle, concurrentContainers)
	for i := range bundles {
		bd, err := lifecycle.NewBundle(filepath.Join(dir, fmt.Sprintf("c-%s-%d", key, i)), lifecycle.Options{
			Template: "testdata/docker-20.10-config.json", NetNS: netns, DropCaps: drop, Env: []string{allow}, Busybox: busybox})
		if err != nil {
			b.Fatal(err)
		}
		bundles[i] = bd
	}
	return bundles
}

// concurrentDocker starts the containers through a private dockerd with
// sforge-runtime registered as runtime "sforge" (daemon.json), all at
// once, checks that each running container's namespace holds its table,
// then removes them all.
func concurrentDocker(b *testing.B, dir, shimBin, hookBin, runc, busybox, allow string, bursts int) concurrentResult {
	b.Helper()
	testenv.RequireBinary(b, "dockerd")
	log := filepath.Join(dir, "runtime-docker.log")
	cfg := filepath.Join(dir, "runtime-docker.json")
	data, _ := json.Marshal(map[string]string{"runtime": runc, "hook": hookBin, "log": log, "engine": engines.Auto})
	if err := os.WriteFile(cfg, data, 0o644); err != nil {
		b.Fatal(err)
	}
	// dockerd, containerd and the runc shims inherit them (the install
	// priority: the default, whatever the bench's environment says).
	b.Setenv("SFORGE_RUNTIME_CONFIG", cfg)
	b.Setenv(priority.EnvVar, "")
	b.Setenv(sforgeshim.HookLogEnv, filepath.Join(dir, "hook-docker.log"))
	d := testdocker.Start(b, testdocker.Options{DaemonConfig: map[string]any{
		"runtimes": map[string]any{"sforge": map[string]any{"path": shimBin}},
	}})
	const image = "sforge-bench/busybox:1"
	d.ImportImage(b, image, busyboxRootfs(b, filepath.Join(dir, "image"), busybox, "sh", "sleep"))
	res := concurrentResult{name: dockerScenario}
	var ids []string
	for round := range bursts {
		names := make([]string, concurrentContainers)
		cids := make([]string, concurrentContainers)
		ds, errs := burst(concurrentContainers, func(i int) error {
			names[i] = fmt.Sprintf("cc-%d-%d", round, i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			out, err := d.Docker(ctx, "run", "-d", "--runtime", "sforge", "--name", names[i], "-e", allow, image, "/bin/sleep", "120")
			if err != nil {
				return fmt.Errorf("docker run: %v: %s", err, out)
			}
			cids[i] = strings.TrimSpace(out)
			return nil
		})
		for i, err := range errs {
			res.started++
			if err != nil {
				res.failures++
				b.Errorf("%s: %v", names[i], err)
				continue
			}
			res.start = append(res.start, ds[i])
			ids = append(ids, cids[i])
			// The running container's own namespace holds its table.
			pid := strings.TrimSpace(d.MustDocker(b, "inspect", "-f", "{{.State.Pid}}", names[i]))
			n, err := nsFromPath("/proc/" + pid + "/ns/net")
			if err != nil {
				b.Fatal(err)
			}
			if got := nftTables(b, n); !regexp.MustCompile(`^SFORGE_`).MatchString(got) || strings.Contains(got, "\n") {
				res.failures++
				b.Errorf("%s: tables in its namespace %q, want its own", names[i], got)
			}
			n.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		if out, err := d.Docker(ctx, append([]string{"rm", "-f"}, names...)...); err != nil {
			b.Errorf("docker rm: %v: %s", err, out)
		}
		cancel()
	}
	res.isolation, res.cpu, res.own, res.unaccounted = shimInstallTimes(b, log, ids)
	res.waited, res.preempted, res.moved = shimSwitches(b, log, ids)
	res.realtime = realtimeInstalls(b, log, ids)
	if out, err := exec.Command("grep", "-c", "level=error", log).Output(); err == nil && strings.TrimSpace(string(out)) != "0" {
		b.Errorf("the shim logged errors:\n%s", out)
	}
	return res
}

// busyboxRootfs makes at rootfs an image's tree: busybox, the applets
// named as links to it, and the directories a runtime mounts over.
func busyboxRootfs(b *testing.B, rootfs, busybox string, applets ...string) string {
	b.Helper()
	for _, sub := range []string{"bin", "etc", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(rootfs, sub), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if data, err := os.ReadFile(busybox); err != nil {
		b.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), data, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, applet := range applets {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			b.Fatal(err)
		}
	}
	return rootfs
}

func nsFromPath(path string) (ns.NetNS, error) { return ns.GetNS(path) }

// concurrentHooks starts the containers through runc with sforge-hook as
// their createRuntime and poststop hooks, as the hooks.d files register it
// for podman and CRI-O (podman's spec, a private namespace each). The
// isolation time is the install the hook logs (its C front's, or the Go
// hook's where the front left it to Go: counted).
func concurrentHooks(b *testing.B, dir, hookBin, runc, busybox string, bursts int, ownSession bool) concurrentResult {
	b.Helper()
	log := filepath.Join(dir, "hook-hooksd.log")
	hooks := hooksdEntries(hookBin, log)
	bundles := make([]*lifecycle.Bundle, concurrentContainers)
	for i := range bundles {
		bd, err := lifecycle.NewBundle(filepath.Join(dir, fmt.Sprintf("h-%d", i)), lifecycle.Options{
			Template: "testdata/podman-4.3-config.json", DropCaps: []string{"CAP_NET_RAW"}, Busybox: busybox,
			Annotations: map[string]string{policy.AnnotationKey: hookAnnotation(b, 4)}, Hooks: hooks})
		if err != nil {
			b.Fatal(err)
		}
		bundles[i] = bd
	}
	rt := &lifecycle.Runtime{Binary: runc, Root: filepath.Join(dir, "root-hooksd"), Env: cleanEnv(), OwnSession: ownSession}
	res := concurrentResult{name: hooksScenario}
	ids := runcBursts(b, rt, bundles, "ch", bursts, &res)
	data, err := os.ReadFile(log)
	if err != nil {
		b.Fatal(err)
	}
	got, cpu, queued, front := map[string]time.Duration{}, map[string]time.Duration{}, map[string]time.Duration{}, map[string]bool{}
	switched := map[string][2]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		m := hookInstallRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		d, err := time.ParseDuration(m[2])
		if err != nil {
			b.Fatalf("%q: %v", line, err)
		}
		got[m[1]], front[m[1]] = d, strings.HasSuffix(line, " front=c")
		if c := hookCPURe.FindStringSubmatch(line); c != nil {
			if cpu[m[1]], err = time.ParseDuration(c[1]); err != nil {
				b.Fatalf("%q: %v", line, err)
			}
		}
		if q := queuedRe.FindStringSubmatch(line); q != nil {
			if queued[m[1]], err = time.ParseDuration(q[1]); err != nil {
				b.Fatalf("%q: %v", line, err)
			}
		}
		if sw := hookSwitchesRe.FindStringSubmatch(line); sw != nil {
			switched[m[1]] = [2]bool{sw[1] != "0", sw[2] != "0"}
		}
	}
	byFront := 0
	for _, id := range ids {
		d, ok := got[id]
		if !ok {
			b.Fatalf("container %s: no install logged in %s", id, log)
		}
		res.isolation = append(res.isolation, d)
		if q, ok := queued[id]; ok {
			res.own = append(res.own, d-q)
			if d-cpu[id]-q > unaccountedGap && !switched[id][0] {
				res.unaccounted++
			}
		}
		if sw := switched[id]; sw[0] {
			res.waited++
		}
		if sw := switched[id]; sw[1] {
			res.preempted++
		}
		if front[id] {
			byFront++
			res.cpu = append(res.cpu, cpu[id])
		}
	}
	res.note = fmt.Sprintf("installed by the hook's C front: %d of %d (CPU: the front's)", byFront, len(ids))
	res.realtime = realtimeInstalls(b, log, ids)
	return res
}

// samplesOf makes samples of the values in units of unit.
func samplesOf(unit time.Duration, v ...int) timing.Samples {
	var s timing.Samples
	for _, x := range v {
		s = append(s, time.Duration(x)*unit)
	}
	return s
}

func TestDelayedByCPU(t *testing.T) {
	us := func(v ...int) timing.Samples { return samplesOf(time.Microsecond, v...) }
	// CPU 0.4 (not delayed), 0.7 (delayed), 0.7, 1.2 (delayed), 3 (delayed).
	wall, cpu := us(450, 9000, 800, 40000, 9000), us(400, 700, 700, 1200, 3000)
	const want = "delayed in their window, by CPU time: <= 0.5 ms 0/1; <= 0.75 ms 1/2; <= 1 ms 0/0; <= 1.5 ms 1/1; > 1.5 ms 1/1"
	if got := delayedByCPU(wall, cpu); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := delayedByCPU(wall, cpu[:2]); got != "" {
		t.Fatalf("samples that do not pair up: %q, want nothing", got)
	}
}

func TestShareOfStart(t *testing.T) {
	ms := func(v ...int) timing.Samples { return samplesOf(time.Millisecond, v...) }
	// Installs of 1, 1, 2 and 40 ms (44 in all) in starts of 1000 ms each.
	const want = "isolation in the start: 1.10% of all starts' wall time; p99 isolation / p50 start 4.00%"
	if got := shareOfStart(ms(1, 1, 2, 40), ms(1000, 1000, 1000, 1000)); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := shareOfStart(ms(1), nil); got != "" {
		t.Fatalf("no starts: %q, want nothing", got)
	}
}

func TestRealtimeInstalls(t *testing.T) {
	log := filepath.Join(t.TempDir(), "x.log")
	lines := `time="t" level=info msg="sforge-runtime: container cc-0-0-1: isolated before start (engine=nftables table=T rules=13 endpoints=1 resolvers=1 ipv6=filtered install=300µs install-cpu=299µs total=310µs switches=0/0 queued=0s priority=realtime spec=1ms runc=30ms front=c)"
time="t" level=info msg="sforge-runtime: container cc-0-0-2: isolated before start (engine=nftables table=T rules=13 endpoints=1 resolvers=1 ipv6=filtered install=300µs install-cpu=299µs total=310µs switches=0/1 queued=5µs priority=normal spec=1ms runc=30ms front=c)"
2026-12-01T15:00:00Z install container=ch-0-3 stage=createRuntime engine=nftables chain=T rules=13 ipv6=filtered duration=400µs cpu=399µs switches=0/0 queued=0s priority=realtime front=c
2026-12-01T15:00:00Z install container=ch-0-4 stage=createRuntime engine=nftables chain=T rules=13 ipv6=filtered duration=400µs front=go: its engine did not install
`
	if err := os.WriteFile(log, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := realtimeInstalls(t, log, []string{"cc-0-0-1", "cc-0-0-2", "ch-0-3", "ch-0-4", "absent"}); got != 2 {
		t.Fatalf("%d installs at real-time priority, want 2 (cc-0-0-1, ch-0-3)", got)
	}
}
