package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/bench/internal/lifecycle"
	"github.com/sforge-dev/netiso/bench/internal/timing"
	"github.com/sforge-dev/netiso/internal/testenv"
)

// The controls (concurrentControls): `sforge run`'s create, burst by
// burst in turn with the same creates through control-runtime
// (testdata/control-runtime.c), the C front with its install replaced by
// CPU time burnt and nothing else. The spins are
// SFORGE_BENCH_CONTROL_SPINS, a comma-separated list of durations or
// "p50", the front's install CPU time median so far in the run (its first
// burst runs before any control).
const (
	controlsScenario  = "controls"
	controlSpinsEnv   = "SFORGE_BENCH_CONTROL_SPINS"
	defaultSpins      = "10us,p50,2ms,32ms"
	controlRealName   = "runc, no NET_RAW, beside controls"
	controlNamePrefix = "control: only burns "
)

// controlSpin is one control's CPU time: fixed, or the front's p50.
type controlSpin struct {
	label string
	spin  time.Duration // 0: the front's p50
}

func controlSpins(tb testing.TB) []controlSpin {
	v := os.Getenv(controlSpinsEnv)
	if v == "" {
		v = defaultSpins
	}
	spins, err := parseControlSpins(v)
	if err != nil {
		tb.Fatalf("%s=%q: %v", controlSpinsEnv, v, err)
	}
	return spins
}

func parseControlSpins(v string) ([]controlSpin, error) {
	var spins []controlSpin
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "p50" {
			spins = append(spins, controlSpin{label: "the front's install CPU p50"})
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q: want a positive duration (2ms) or p50", f)
		}
		spins = append(spins, controlSpin{label: d.String(), spin: d})
	}
	return spins, nil
}

// concurrentControls runs the controls: bursts rounds in each of which
// the front's creates and each control's go in turn (the order rotated
// each round, the front first in the first), so that the same host load
// meets them all. If the control's window has the tail the front's
// install has, no install, lock or engine made it.
func concurrentControls(b *testing.B, dir, shimBin, hookBin, runc, busybox, allow string, bursts int, spins []controlSpin, ownSession bool) []concurrentResult {
	b.Helper()
	controlBin := buildControlRuntime(b, dir)
	type contender struct {
		key     string // names its files and containers
		res     concurrentResult
		rt      *lifecycle.Runtime
		log     string
		bundles []*lifecycle.Bundle
		spin    controlSpin
		ids     []string
	}
	rt, log, bundles := shimScenario(b, dir, "ctl-front", shimBin, hookBin, runc, busybox, allow, "", []string{"CAP_NET_RAW"})
	rt.OwnSession = ownSession
	front := &contender{key: "ctl-front", res: concurrentResult{name: controlRealName}, rt: rt, log: log, bundles: bundles}
	cs := []*contender{front}
	for k, sp := range spins {
		key := fmt.Sprintf("ctl-%d", k)
		log := filepath.Join(dir, "control-"+key+".log")
		rt := &lifecycle.Runtime{Binary: controlBin, Root: filepath.Join(dir, "root-"+key), OwnSession: ownSession,
			Env: append(cleanEnv(), "SFORGE_BENCH_RUNC="+runc, "SFORGE_BENCH_CONTROL_LOG="+log)}
		cs = append(cs, &contender{key: key, res: concurrentResult{name: controlNamePrefix + sp.label}, rt: rt, log: log, spin: sp,
			bundles: dockerBundles(b, dir, key, busybox, allow, "", []string{"CAP_NET_RAW"})})
	}
	var lastP50 time.Duration
	for round := range bursts {
		for j := range cs {
			c := cs[(j+round)%len(cs)]
			if c != front {
				spin := c.spin.spin
				if spin == 0 {
					_, cpu, _, _ := shimInstallTimes(b, front.log, front.ids)
					spin, lastP50 = cpu.Median(), cpu.Median()
				}
				c.rt.Env = append(slices.DeleteFunc(c.rt.Env, func(e string) bool { return strings.HasPrefix(e, "SFORGE_BENCH_SPIN_NS=") }),
					fmt.Sprintf("SFORGE_BENCH_SPIN_NS=%d", spin.Nanoseconds()))
			}
			c.ids = append(c.ids, runcBursts(b, c.rt, c.bundles, fmt.Sprintf("%s-%d", c.key, round), 1, &c.res)...)
		}
	}
	var results []concurrentResult
	for _, c := range cs {
		c.res.isolation, c.res.cpu, c.res.own, c.res.unaccounted = shimInstallTimes(b, c.log, c.ids)
		c.res.waited, c.res.preempted, c.res.moved = shimSwitches(b, c.log, c.ids)
		c.res.realtime = realtimeInstalls(b, c.log, c.ids)
		if c == front {
			if data, _ := os.ReadFile(c.log); strings.Count(string(data), " front=c)") != len(c.ids) {
				b.Fatalf("%s: %d of %d installs by the C front", c.res.name, strings.Count(string(data), " front=c)"), len(c.ids))
			}
		} else if c.spin.spin == 0 {
			c.res.note = fmt.Sprintf("spin per burst: the front's install CPU p50 so far (last %s)", timing.Ms(lastP50))
		}
		results = append(results, c.res)
	}
	return results
}

// buildControlRuntime compiles testdata/control-runtime.c into dir as
// the fronts are built (musl, static) and returns its path.
func buildControlRuntime(tb testing.TB, dir string) string {
	tb.Helper()
	testenv.RequireBinary(tb, "musl-gcc")
	bin := filepath.Join(dir, "control-runtime")
	if out, err := exec.Command("musl-gcc", "-static", "-O2", "-Wall", "-Werror", "-I", "../internal/cfront", "-o", bin, "testdata/control-runtime.c").CombinedOutput(); err != nil {
		tb.Fatalf("musl-gcc control-runtime.c: %v\n%s", err, out)
	}
	return bin
}

// controlsSummary puts the front's wall-time p99/p50 beside the controls'
// in one line, "" without controls.
func controlsSummary(results []concurrentResult) string {
	var parts []string
	for _, r := range results {
		if r.name == controlRealName || strings.HasPrefix(r.name, controlNamePrefix) {
			parts = append(parts, fmt.Sprintf("%s %.2fx", strings.TrimPrefix(r.name, controlNamePrefix), float64(r.isolation.Quantile(0.99))/float64(max(1, r.isolation.Median()))))
		}
	}
	if len(parts) < 2 {
		return ""
	}
	return "wall p99/p50, the front beside windows that only burn CPU (same bursts, in turn): " + strings.Join(parts, "; ")
}

func TestParseControlSpins(t *testing.T) {
	got, err := parseControlSpins("10us, p50,32ms")
	if err != nil {
		t.Fatal(err)
	}
	want := []controlSpin{{"10µs", 10 * time.Microsecond}, {"the front's install CPU p50", 0}, {"32ms", 32 * time.Millisecond}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "p99", "0s", "-1ms", "10", "1ms,,2ms"} {
		if _, err := parseControlSpins(bad); err == nil || !strings.Contains(err.Error(), "want a positive duration") {
			t.Errorf("%q: err %v, want one that says what it wants", bad, err)
		}
	}
}

// The control builds with the fronts' helpers as they change, refuses to
// run half-configured, and passes every command but create to runc (here
// echo) untouched. Its create is the benchmark's to run (root, runc).
func TestControlRuntime(t *testing.T) {
	bin := buildControlRuntime(t, t.TempDir())
	run := func(env []string, args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil {
			t.Fatalf("control-runtime did not start: %v", err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	settings := func(spin string) []string {
		return []string{"SFORGE_BENCH_RUNC=" + testenv.RequireBinary(t, "echo"), "SFORGE_BENCH_CONTROL_LOG=" + filepath.Join(t.TempDir(), "log"), "SFORGE_BENCH_SPIN_NS=" + spin}
	}
	if out, code := run([]string{}, "state", "x"); code != 125 || !strings.Contains(out, "SFORGE_BENCH_SPIN_NS must be set") {
		t.Errorf("without its settings: exit %d, %q; want 125 and what to set", code, out)
	}
	if out, code := run(settings("1000"), "--root", "/r", "delete", "--force", "x"); code != 0 || out != "--root /r delete --force x\n" {
		t.Errorf("delete: exit %d, %q; want it passed to runc as it came", code, out)
	}
	if out, code := run(settings("1ms")); code != 125 || !strings.Contains(out, "want nanoseconds") {
		t.Errorf("SFORGE_BENCH_SPIN_NS=1ms: exit %d, %q; want 125 and the unit", code, out)
	}
}
