package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/iptables"
	"github.com/sforge-dev/netiso/internal/testbundle"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
)

// The hook benchmarks measure whole operations as users pay for them
// (process spawns included), interleaving the variants round by round so
// that machine noise hits them alike, and report median and p95 with the
// ratio to the baseline measured in the same run. They assert nothing.

// hookSample collects one variant's durations.
type hookSample struct {
	name string
	d    []time.Duration
}

func (s *hookSample) quantile(q float64) time.Duration {
	d := slices.Clone(s.d)
	slices.Sort(d)
	// Nearest rank.
	i := int(float64(len(d))*q+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

func (s *hookSample) median() time.Duration { return s.quantile(0.5) }
func (s *hookSample) p95() time.Duration    { return s.quantile(0.95) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// hookInterleave runs each variant once per round, rotating which goes
// first, and returns the samples.
func hookInterleave(b *testing.B, rounds int, names []string, run func(variant, round int) time.Duration) []*hookSample {
	b.Helper()
	samples := make([]*hookSample, len(names))
	for i, n := range names {
		samples[i] = &hookSample{name: n}
	}
	for r := range rounds {
		for k := range names {
			v := (k + r) % len(names)
			samples[v].d = append(samples[v].d, run(v, r))
		}
	}
	return samples
}

func hookRequire(b *testing.B) {
	b.Helper()
	testenv.RequireRoot(b)
	for _, bin := range []string{"runc", "busybox", "iptables", "ip6tables", "iptables-restore", "ip6tables-restore"} {
		testenv.RequireBinary(b, bin)
	}
}

// hookAllowlist has n entries: endpoints on TEST-NET addresses, and one
// resolver from 4 entries up (as a Kubernetes allowlist has).
func hookAllowlist(n int) string {
	entries := []string{"v1"}
	if n >= 4 {
		entries = append(entries, "dns:10.96.0.10")
		n--
	}
	for i := range n {
		entries = append(entries, fmt.Sprintf("tcp:198.51.%d.%d:%d", 100+i/250, 1+i%250, 8000+i))
	}
	return strings.Join(entries, ";")
}

// BenchmarkHookLifecycle: `runc run` of a busybox container that runs
// `true` (create, start, exit, delete), with sforge-hook as createRuntime
// and poststop hooks (allowlist of 4 entries) against the same container
// without hooks; once with a private network namespace (poststop has
// nothing to do) and once joining a bind-mounted one (poststop removes the
// chain).
func BenchmarkHookLifecycle(b *testing.B) {
	hookRequire(b)
	const rounds = 30
	r := testbundle.NewRunc(b)
	shared := testenv.NewNetNS(b)
	allow := map[string]string{policy.AnnotationKey: hookAllowlist(4)}
	privateNS := func(s *specs.Spec) {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	busybox := []string{"/bin/busybox", "true"}
	bundles := []*testbundle.Bundle{
		testbundle.New(b, testbundle.Options{Busybox: true, Args: busybox, Edit: privateNS}),
		testbundle.New(b, testbundle.Options{Busybox: true, Args: busybox, Edit: privateNS, Hook: true, Annotations: allow}),
		testbundle.New(b, testbundle.Options{Busybox: true, Args: busybox, NetNS: shared.Path()}),
		testbundle.New(b, testbundle.Options{Busybox: true, Args: busybox, NetNS: shared.Path(), Hook: true, Annotations: allow}),
	}
	names := []string{"plain, private netns", "hook, private netns", "plain, netns path", "hook, netns path"}
	for range b.N {
		samples := hookInterleave(b, rounds, names, func(v, round int) time.Duration {
			id := fmt.Sprintf("bench-%d-%d", v, round)
			start := time.Now()
			res := r.Run(b, bundles[v], id)
			d := time.Since(start)
			if res.Err != nil {
				b.Fatalf("%s: runc run: %v\n%s", names[v], res.Err, res.Output())
			}
			return d
		})
		for _, i := range []int{1, 3} {
			if log := bundles[i].Log(); !strings.Contains(log, "install container=") {
				b.Fatalf("the hook did not install:\n%s", log)
			}
		}
		var t strings.Builder
		fmt.Fprintf(&t, "runc lifecycle (create, start, exit, delete) of busybox true, %d interleaved rounds, allowlist of 4 entries\n", rounds)
		fmt.Fprintf(&t, "%-22s %10s %10s %8s\n", "variant", "median", "p95", "ratio")
		for i, s := range samples {
			base := samples[i&^1] // plain variant of the same netns kind
			fmt.Fprintf(&t, "%-22s %10s %10s %7.2fx\n", s.name, ms(s.median()), ms(s.p95()),
				float64(s.median())/float64(base.median()))
		}
		b.Log("\n" + t.String())
		b.ReportMetric(float64(samples[1].median())/float64(samples[0].median()), "hook/plain-private")
		b.ReportMetric(float64(samples[3].median())/float64(samples[2].median()), "hook/plain-path")
	}
}

// BenchmarkHookInstall: installing and removing one container's rules in
// a namespace, for allowlists of 2, 16 and 128 entries: the engine called
// in-process, the sforge-hook binary run as the runtime runs it
// (createRuntime, then poststop), and the seed's approach, one `iptables`
// exec per rule (the same rules, both families; the seed's `sudo -n` is
// left out, which only flatters it).
func BenchmarkHookInstall(b *testing.B) {
	hookRequire(b)
	bins := testbundle.Build(b)
	for _, size := range []int{2, 16, 128} {
		b.Run(fmt.Sprintf("entries=%d", size), func(b *testing.B) {
			rounds := 20
			if size == 128 {
				rounds = 8 // the seed approach takes most of a second per round
			}
			value := hookAllowlist(size)
			a, err := policy.Decode(value)
			if err != nil {
				b.Fatal(err)
			}
			rs, err := policy.Rules(a)
			if err != nil {
				b.Fatal(err)
			}
			n := testenv.NewNetNS(b)
			eng := iptables.New(iptables.Options{})
			hook := newHookRunner(b, bins.Hook, n, value)
			names := []string{"engine in-process", "sforge-hook process", "seed: exec per rule"}
			for range b.N {
				samples := hookInterleave(b, rounds, names, func(v, round int) time.Duration {
					id := fmt.Sprintf("bench-%d-%d", v, round)
					start := time.Now()
					switch v {
					case 0:
						t := engine.Target{NetNS: n.Path(), ID: id}
						if _, err := eng.Install(t, a); err != nil {
							b.Fatal(err)
						}
						if err := eng.Remove(t); err != nil {
							b.Fatal(err)
						}
					case 1:
						hook.run(b, id)
					case 2:
						seedInstallRemove(b, n, id, rs)
					}
					return time.Since(start)
				})
				var t strings.Builder
				fmt.Fprintf(&t, "install + remove, %d entries (%d rules), %d interleaved rounds\n", size, rs.Len(), rounds)
				fmt.Fprintf(&t, "%-22s %10s %10s %14s\n", "variant", "median", "p95", "seed/variant")
				seed := samples[2].median()
				for _, s := range samples {
					fmt.Fprintf(&t, "%-22s %10s %10s %13.1fx\n", s.name, ms(s.median()), ms(s.p95()), float64(seed)/float64(s.median()))
				}
				b.Log("\n" + t.String())
				b.ReportMetric(float64(seed)/float64(samples[1].median()), "seed/hook")
			}
		})
	}
}

// hookRunner runs the sforge-hook binary for a container whose process
// is a sleeper inside the namespace, the way runc runs it.
type hookRunner struct {
	bin, bundle, log string
	pid              int
}

func newHookRunner(b *testing.B, bin string, n ns.NetNS, value string) *hookRunner {
	b.Helper()
	dir := b.TempDir()
	s := &specs.Spec{
		Version:     specs.Version,
		Annotations: map[string]string{policy.AnnotationKey: value},
		Process:     &specs.Process{Args: []string{"/probe"}, Capabilities: testbundle.Caps(testbundle.DefaultCaps...)},
		Linux:       &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: n.Path()}}},
	}
	data, err := json.Marshal(s)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	// The "container process": started from a thread inside the
	// namespace, so it lives there.
	var sleeper *exec.Cmd
	if err := n.Do(func(ns.NetNS) error {
		sleeper = exec.Command("sleep", "3600")
		return sleeper.Start()
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	return &hookRunner{bin: bin, bundle: dir, log: filepath.Join(dir, "hook.log"), pid: sleeper.Process.Pid}
}

func (h *hookRunner) run(b *testing.B, id string) {
	b.Helper()
	for _, stage := range []string{"createRuntime", "poststop"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, h.bin, stage, "--log", h.log)
		cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.0.2","id":%q,"status":"creating","pid":%d,"bundle":%q}`, id, h.pid, h.bundle))
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || len(out) != 0 {
			b.Fatalf("sforge-hook %s: %v: %s", stage, err, out)
		}
	}
}

// seedInstallRemove is the seed's approach: a chain built with one
// iptables process per rule, then taken down the same way.
func seedInstallRemove(b *testing.B, n ns.NetNS, id string, rs policy.Ruleset) {
	b.Helper()
	chain, err := policy.ChainName(id)
	if err != nil {
		b.Fatal(err)
	}
	var cmds [][]string
	for _, fam := range []struct {
		bin   string
		f     policy.Family
		rules []policy.Rule
	}{{"iptables", policy.IPv4, rs.IPv4}, {"ip6tables", policy.IPv6, rs.IPv6}} {
		cmds = append(cmds, []string{fam.bin, "-w", "-N", chain})
		for _, spec := range policy.IPTablesRules(fam.rules) {
			cmds = append(cmds, append([]string{fam.bin, "-w", "-A", chain}, spec...))
		}
		for _, h := range policy.Hooks(fam.f) {
			cmds = append(cmds, []string{fam.bin, "-w", "-I", h, "1", "-j", chain})
		}
		for _, h := range policy.Hooks(fam.f) {
			cmds = append(cmds, []string{fam.bin, "-w", "-D", h, "-j", chain})
		}
		cmds = append(cmds, []string{fam.bin, "-w", "-F", chain}, []string{fam.bin, "-w", "-X", chain})
	}
	err = n.Do(func(ns.NetNS) error {
		for _, c := range cmds {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %v: %s", strings.Join(c, " "), err, out)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkHookNothingToDo: the hook process for a container without an
// allowlist (it reads the state and config.json and exits), against
// /bin/true: what every container pays where the hook is registered for
// all containers (podman's hooks.d with an always condition, say).
func BenchmarkHookNothingToDo(b *testing.B) {
	testenv.RequireRoot(b)
	bins := testbundle.Build(b)
	dir := b.TempDir()
	data, err := json.Marshal(&specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/x"}, Env: []string{"PATH=/bin"}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	state := fmt.Sprintf(`{"ociVersion":"1.0.2","id":"c","status":"creating","pid":1,"bundle":%q}`, dir)
	names := []string{"/bin/true", "sforge-hook, no allowlist"}
	for range b.N {
		samples := hookInterleave(b, 100, names, func(v, _ int) time.Duration {
			cmd := exec.Command("/bin/true")
			if v == 1 {
				cmd = exec.Command(bins.Hook, "createRuntime", "--log", filepath.Join(dir, "hook.log"))
			}
			cmd.Stdin = strings.NewReader(state)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			d := time.Since(start)
			if err != nil || len(out) != 0 {
				b.Fatalf("%s: %v: %s", names[v], err, out)
			}
			return d
		})
		var t strings.Builder
		fmt.Fprintf(&t, "process start to exit, 100 interleaved rounds\n%-26s %10s %10s\n", "variant", "median", "p95")
		for _, s := range samples {
			fmt.Fprintf(&t, "%-26s %10s %10s\n", s.name, ms(s.median()), ms(s.p95()))
		}
		b.Log("\n" + t.String())
	}
}
