package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	nft "github.com/google/nftables"

	"github.com/sforge-dev/netiso/bench/internal/lifecycle"
	"github.com/sforge-dev/netiso/bench/internal/timing"
	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/engine/priority"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
	sforgeshim "github.com/sforge-dev/netiso/shim"
)

// Lifecycle benchmark (issue 9): what isolation costs a container's whole
// life — create, start, exit, delete, as containerd's runc shim drives a
// runtime — on each path sforge offers, against the same container
// without isolation, in one interleaved run:
//
//   - the runtime-shim path (Docker, containerd): sforge-runtime in place
//     of runc; for a private namespace it makes the namespace, installs
//     the rules in it and execs runc create (for one given by path it runs
//     runc create as a child and installs before returning);
//   - the hooks.d path (podman, CRI-O): runc with sforge-hook as the
//     createRuntime and poststop hooks, as the hooks.d files register it
//     (and the same hook built without its C front, hook/front);
//   - the seed's approach: runc, plus one iptables process per rule run
//     into the created container's namespace before start.
//
// The bundles are config.json files captured from Docker 20.10 and podman
// 4.3 on this kind of machine (bench/testdata), so a container costs what
// it costs there (seccomp filter, mounts, device rules); a minimal spec
// without them is measured too. Both engines, allowlists of 4 and 256
// entries, private namespaces and namespaces given by path.

// lcContender is one way of running a container.
type lcContender struct {
	group, name string
	base        *lcContender // the same container without isolation
	rt          *lifecycle.Runtime
	bundle      *lifecycle.Bundle
	// mark is in every install line of this contender's (" front=c)":
	// the C front installed, not the Go shim).
	mark string
	// isoLog is the shim's or the hook's log, from which each container's
	// isolation time is read (seed contenders measure it directly).
	isoLog, isoKind string
	seed            bool
	isolated        bool

	total, create, start, delete, iso timing.Samples
	ids                               []string
}

var (
	// shimInstallRe also reads the control windows of control-runtime
	// (testdata/control-runtime.c), written in the front's words.
	shimInstallRe = regexp.MustCompile(`container (\S+): (?:isolated before start|control window) \(.* install=(\S+) install-cpu=(\S+) total=`)
	hookInstallRe = regexp.MustCompile(`install container=(\S+) .* duration=(\S+)`)
)

// isolationTimes reads, for each container id, the install time the shim
// or hook logged (the engine's own measure: namespace entry, batch, its
// check: the Go engine's read-back, the C's echoes).
func (c *lcContender) isolationTimes(tb testing.TB) {
	if c.isoLog == "" {
		return
	}
	b, err := os.ReadFile(c.isoLog)
	if err != nil {
		tb.Fatalf("%s: %v", c.name, err)
	}
	re := shimInstallRe
	if c.isoKind == "hook" {
		re = hookInstallRe
	}
	got := map[string]time.Duration{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		d, err := time.ParseDuration(m[2])
		if err != nil {
			tb.Fatalf("%s: %q: %v", c.name, m[0], err)
		}
		got[m[1]] = d
	}
	for _, id := range c.ids {
		d, ok := got[id]
		if !ok {
			tb.Fatalf("%s: container %s was not isolated (no install line in %s):\n%s", c.name, id, c.isoLog, b)
		}
		c.iso = append(c.iso, d)
	}
	if c.mark != "" && strings.Count(string(b), c.mark) != len(c.ids) {
		tb.Fatalf("%s: %d of %d installs logged with %q:\n%s", c.name, strings.Count(string(b), c.mark), len(c.ids), c.mark, b)
	}
}

// hooksdEntries are sforge-hook's createRuntime and poststop hooks as the
// hooks.d files register them (its log in log, then args).
func hooksdEntries(bin, log string, args ...string) map[string][]lifecycle.Hook {
	timeout := 10
	h := map[string][]lifecycle.Hook{}
	for _, stage := range []string{"createRuntime", "poststop"} {
		h[stage] = []lifecycle.Hook{{Path: bin, Args: append([]string{"sforge-hook", stage, "--log", log}, args...),
			Env: []string{sforgeshim.HookProcsEnv}, Timeout: &timeout}}
	}
	return h
}

// runEnv is the environment `sforge run` gives an agent besides the
// allowlist, as it gives it for examples/hello-judge (the config.json of
// TestLauncherRootless's run): Docker writes the prompt's newlines as
// JSON escapes, which the fronts' readers must pass over.
var runEnv = []string{
	"SFORGE_AGENT_QUERY=Say hello to the judge, then check that nothing else is reachable.\n\nNetwork access is restricted: only the Judge server and the AI API are reachable; all dependencies are preinstalled; do not try to download anything.",
	"SFORGE_JUDGE_URL=http://198.51.100.10:8080",
}

func BenchmarkLifecycle(b *testing.B) {
	hookRequire(b)
	if err := lifecycle.SetSubreaper(); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	shimBin, hookBin := filepath.Join(dir, "sforge-runtime"), filepath.Join(dir, "sforge-hook")
	build(b, shimBin, "../cmd/sforge-runtime", "")
	// The shim as it was before its C front (shim/front): pure Go, every
	// subcommand a Go process start.
	pureGoShimBin := filepath.Join(dir, "sforge-runtime-pure-go")
	buildPureGo(b, pureGoShimBin, "../cmd/sforge-runtime")
	build(b, hookBin, "../cmd/sforge-hook", "")
	// The hook as it was before its C front (hook/front): every poststop a
	// Go process start.
	pureGoHookBin := filepath.Join(dir, "sforge-hook-pure-go")
	buildPureGo(b, pureGoHookBin, "../cmd/sforge-hook")
	wrapperBin := filepath.Join(dir, "exec-wrapper")
	build(b, wrapperBin, "./cmd/exec-wrapper", "")
	emptyHookBin := filepath.Join(dir, "empty-hook")
	build(b, emptyHookBin, "./cmd/empty-hook", "")
	runc := testenv.RequireBinary(b, "runc")
	busybox := testenv.RequireBinary(b, "busybox")
	root := filepath.Join(dir, "runc")
	pathNS := testenv.NewNetNS(b)
	env := cleanEnv()
	host := hostHooks(b)

	n := 0
	newBundle := func(o lifecycle.Options) *lifecycle.Bundle {
		n++
		o.Busybox = busybox
		bd, err := lifecycle.NewBundle(filepath.Join(dir, fmt.Sprintf("b%d", n)), o)
		if err != nil {
			b.Fatal(err)
		}
		return bd
	}
	plainRT := &lifecycle.Runtime{Binary: runc, Root: root, Env: env}
	shimRTBin := func(bin, engineName string) (*lifecycle.Runtime, string) {
		n++
		cfg := filepath.Join(dir, fmt.Sprintf("runtime-%d.json", n))
		log := filepath.Join(dir, fmt.Sprintf("runtime-%d.log", n))
		data, _ := json.Marshal(map[string]string{"runtime": runc, "hook": hookBin, "log": log, "engine": engineName})
		if err := os.WriteFile(cfg, data, 0o644); err != nil {
			b.Fatal(err)
		}
		// The shim passes its SFORGE_HOOK_LOG to the poststop hook it adds
		// for a namespace given by path; without it that hook would log
		// to the host's /var/log/sforge/hook.log.
		hookLog := filepath.Join(dir, fmt.Sprintf("runtime-%d-hook.log", n))
		return &lifecycle.Runtime{Binary: bin, Root: root,
			Env: append(slices.Clip(env), "SFORGE_RUNTIME_CONFIG="+cfg, sforgeshim.HookLogEnv+"="+hookLog)}, log
	}
	shimRT := func(engineName string) (*lifecycle.Runtime, string) { return shimRTBin(shimBin, engineName) }
	docker, podman := "testdata/docker-20.10-config.json", "testdata/podman-4.3-config.json"

	var cs []*lcContender
	add := func(c *lcContender) *lcContender { cs = append(cs, c); return c }
	plain := func(group, template, netns string, drop []string) *lcContender {
		return add(&lcContender{group: group, name: "plain runc", rt: plainRT,
			bundle: newBundle(lifecycle.Options{Template: template, NetNS: netns, DropCaps: drop})})
	}
	// shim: the spec as Docker writes it (CAP_NET_RAW granted, which the
	// shim drops from config.json), or with asRun as `sforge run` has
	// Docker write it (--cap-drop NET_RAW: nothing to change).
	shim := func(group, template, netns string, base *lcContender, engineName string, size int, asRun bool) {
		rt, log := shimRT(engineName)
		name, drop, mark := fmt.Sprintf("sforge-runtime, %s, %d", engineName, size), []string(nil), ""
		if asRun {
			name, drop = name+", no NET_RAW (sforge run)", []string{"CAP_NET_RAW"}
		}
		// Docker's spec with a namespace of its own: the C front's create,
		// and every install must say so.
		if engineName == engines.NFTables && netns == "" && template == docker {
			mark = ` front=c), CAP_NET_RAW dropped"`
			if asRun {
				mark = ` front=c)"`
			}
		}
		env := []string{policy.EnvVar + "=" + hookAnnotation(b, size)}
		if asRun {
			env = append(runEnv, env...)
		}
		add(&lcContender{group: group, name: name, base: base, rt: rt, mark: mark,
			bundle: newBundle(lifecycle.Options{Template: template, NetNS: netns, DropCaps: drop, Env: env}),
			isoLog: log, isoKind: "shim", isolated: true})
	}
	hookBinary := func(bin, label, group, template, netns string, base *lcContender, engineName string, size int) {
		n++
		log := filepath.Join(dir, fmt.Sprintf("hook-%d.log", n))
		add(&lcContender{group: group, name: fmt.Sprintf("runc + %s, %s, %d", label, engineName, size), base: base, rt: plainRT,
			bundle: newBundle(lifecycle.Options{Template: template, NetNS: netns, DropCaps: []string{"CAP_NET_RAW"},
				Annotations: map[string]string{policy.AnnotationKey: hookAnnotation(b, size)}, Hooks: hooksdEntries(bin, log, "--engine", engineName)}),
			isoLog: log, isoKind: "hook", isolated: true})
	}
	hook := func(group, template, netns string, base *lcContender, engineName string, size int) {
		hookBinary(hookBin, "sforge-hook", group, template, netns, base, engineName, size)
	}
	seed := func(group, template string, base *lcContender, size int, sudo bool) {
		name, install := fmt.Sprintf("runc + seed (exec per rule), %d", size), seedInstall
		if sudo {
			name, install = fmt.Sprintf("runc + seed as run (sudo -n per rule), %d", size), seedInstallSudo
		}
		c := &lcContender{group: group, name: name, base: base, seed: true, isolated: true,
			bundle: newBundle(lifecycle.Options{Template: template, DropCaps: []string{"CAP_NET_RAW"}})}
		a := allowlist(b, size)
		c.rt = &lifecycle.Runtime{Binary: runc, Root: root, Env: env, AfterCreate: func(pid int) error {
			n, err := ns.GetNS(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				return err
			}
			defer n.Close()
			d, err := install(n, fmt.Sprintf("seed%d", len(c.iso)), a)
			c.iso = append(c.iso, d)
			return err
		}}
		add(c)
	}

	g := "docker 20.10 spec, private netns (shim path)"
	base := plain(g, docker, "", nil)
	add(&lcContender{group: g, name: "Go exec wrapper (floor), no allowlist", base: base,
		rt:     &lifecycle.Runtime{Binary: wrapperBin, Root: root, Env: append(slices.Clip(env), "SFORGE_BENCH_RUNC="+runc)},
		bundle: newBundle(lifecycle.Options{Template: docker})})
	{
		rt, _ := shimRT(engines.Auto)
		add(&lcContender{group: g, name: "sforge-runtime, no allowlist (pass-through)", base: base, rt: rt,
			bundle: newBundle(lifecycle.Options{Template: docker})})
	}
	for _, e := range []string{engines.NFTables, engines.IPTables} {
		for _, size := range []int{4, 256} {
			shim(g, docker, "", base, e, size, false)
		}
	}
	for _, size := range []int{4, 256} {
		shim(g, docker, "", base, engines.NFTables, size, true)
	}
	{
		rt, _ := shimRTBin(pureGoShimBin, engines.Auto)
		add(&lcContender{group: g, name: "pure-Go sforge-runtime, no allowlist", base: base, rt: rt,
			bundle: newBundle(lifecycle.Options{Template: docker})})
		rt, log := shimRTBin(pureGoShimBin, engines.NFTables)
		add(&lcContender{group: g, name: "pure-Go sforge-runtime, nftables, 4", base: base, rt: rt,
			bundle: newBundle(lifecycle.Options{Template: docker, Env: []string{policy.EnvVar + "=" + hookAnnotation(b, 4)}}),
			isoLog: log, isoKind: "shim", isolated: true})
	}
	for _, size := range []int{4, 256} {
		seed(g, docker, base, size, false)
	}
	// The seed ran each iptables through `sudo -n` (a process more per
	// rule); 4 entries only: at 256 a lifecycle would take seconds.
	if _, err := exec.LookPath("sudo"); err == nil {
		seed(g, docker, base, 4, true)
	} else if testenv.InCI() {
		b.Fatal("sudo is missing: the seed-as-run baseline needs it (make deps installs it)")
	} else {
		b.Log("LOUD SKIP: no sudo, so no seed-as-run baseline (make deps installs it)")
	}
	g = "podman 4.3 spec, private netns (hooks.d path)"
	base = plain(g, podman, "", []string{"CAP_NET_RAW"})
	{
		// What two hook processes cost before they do anything: a Go
		// program that reads its state and exits, at both stages.
		// And what one costs: the createRuntime hook is the one that does
		// the work; sforge-hook's poststop of a private namespace ends in
		// its C front.
		timeout := 10
		empty := map[string][]lifecycle.Hook{}
		for _, stage := range []string{"createRuntime", "poststop"} {
			empty[stage] = []lifecycle.Hook{{Path: emptyHookBin, Args: []string{"empty-hook", stage}, Env: []string{sforgeshim.HookProcsEnv}, Timeout: &timeout}}
		}
		add(&lcContender{group: g, name: "runc + empty Go hooks (floor), 2 stages", base: base, rt: plainRT,
			bundle: newBundle(lifecycle.Options{Template: podman, DropCaps: []string{"CAP_NET_RAW"}, Hooks: empty})})
		one := map[string][]lifecycle.Hook{"createRuntime": empty["createRuntime"]}
		add(&lcContender{group: g, name: "runc + empty Go hook (floor), createRuntime", base: base, rt: plainRT,
			bundle: newBundle(lifecycle.Options{Template: podman, DropCaps: []string{"CAP_NET_RAW"}, Hooks: one})})
	}
	for _, e := range []string{engines.NFTables, engines.IPTables} {
		for _, size := range []int{4, 256} {
			hook(g, podman, "", base, e, size)
		}
	}
	hookBinary(pureGoHookBin, "pure-Go sforge-hook", g, podman, "", base, engines.NFTables, 4)
	g = "netns by path (--network container:X, pods; poststop removes)"
	base = plain(g, docker, pathNS.Path(), nil)
	shim(g, docker, pathNS.Path(), base, engines.NFTables, 4, false)
	base = plain(g, podman, pathNS.Path(), []string{"CAP_NET_RAW"})
	hook(g, podman, pathNS.Path(), base, engines.NFTables, 4)
	hookBinary(pureGoHookBin, "pure-Go sforge-hook", g, podman, pathNS.Path(), base, engines.NFTables, 4)
	g = "docker 20.10 spec, --userns-remap (a user namespace of its own)"
	base = add(&lcContender{group: g, name: "plain runc", rt: plainRT,
		bundle: newBundle(lifecycle.Options{Template: docker, UserNS: true})})
	{
		rt, log := shimRT(engines.NFTables)
		add(&lcContender{group: g, name: "sforge-runtime, nftables, 4", base: base, rt: rt,
			mark:   ` front=c), CAP_NET_RAW dropped"`,
			bundle: newBundle(lifecycle.Options{Template: docker, UserNS: true, Env: []string{policy.EnvVar + "=" + hookAnnotation(b, 4)}}),
			isoLog: log, isoKind: "shim", isolated: true})
	}
	g = "minimal spec (no seccomp, 2 mounts), private netns"
	base = plain(g, "", "", nil)
	shim(g, "", "", base, engines.NFTables, 4, false)
	hook(g, "", "", base, engines.NFTables, 4)

	// SFORGE_BENCH_ONLY=<regexp> keeps the contenders whose "group / name"
	// matches (and their baselines), for a quick look at a few.
	if only := os.Getenv("SFORGE_BENCH_ONLY"); only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			b.Fatalf("SFORGE_BENCH_ONLY: %v", err)
		}
		keep := map[*lcContender]bool{}
		for _, c := range cs {
			if re.MatchString(c.group + " / " + c.name) {
				keep[c] = true
				if c.base != nil {
					keep[c.base] = true
				}
			}
		}
		cs = slices.DeleteFunc(cs, func(c *lcContender) bool { return !keep[c] })
	}
	nr := rounds(30)
	load0 := loadAvg()
	start := time.Now()
	for range b.N {
		for round := range nr {
			for k := range cs {
				ci := (k + round) % len(cs)
				c := cs[ci]
				if err := c.bundle.Reset(); err != nil {
					b.Fatal(err)
				}
				id := fmt.Sprintf("lc-%d-%d", ci, round)
				t, err := c.rt.Lifecycle(c.bundle, id)
				if err != nil {
					b.Fatalf("%s / %s: %v", c.group, c.name, err)
				}
				c.ids = append(c.ids, id)
				c.total = append(c.total, t.Total)
				c.create = append(c.create, t.Create)
				c.start = append(c.start, t.Start)
				c.delete = append(c.delete, t.Delete)
			}
		}
	}
	elapsed := time.Since(start)
	if keep := os.Getenv("SFORGE_BENCH_KEEP_LOGS"); keep != "" {
		for _, c := range cs {
			if c.isoLog != "" {
				data, _ := os.ReadFile(c.isoLog)
				_ = os.WriteFile(filepath.Join(keep, filepath.Base(c.isoLog)), data, 0o644)
			}
		}
	}
	for _, c := range cs {
		c.isolationTimes(b)
	}
	if left := nftTables(b, pathNS); left != "" {
		b.Fatalf("tables left in the shared namespace after every container was deleted:\n%s", left)
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\ncontainer lifecycle (create, start, exit, delete; runtime processes as containerd runs them), %d rounds interleaved in %s; load average %s -> %s\n",
		nr, elapsed.Round(time.Second), load0, loadAvg())
	fmt.Fprintf(&out, "host: %s\n", host)
	fmt.Fprintf(&out, "ms, median / p95; ratio = of medians to plain runc of the same group; paired = median of the per-round ratios; isolation = the install as the shim/hook logs it (seed: its execs)\n")
	group := ""
	for _, c := range cs {
		if c.group != group {
			group = c.group
			fmt.Fprintf(&out, "\n%s\n%-54s %19s %7s %7s %8s %8s %8s %19s\n", group, "contender", "lifecycle", "ratio", "paired", "create", "start", "delete", "isolation")
		}
		ratio, paired := 1.0, 1.0
		if c.base != nil {
			ratio, paired = timing.Ratio(c.total, c.base.total), timing.PairedRatio(c.total, c.base.total)
		}
		iso := ""
		if len(c.iso) > 0 {
			iso = timing.Ms(c.iso.Median()) + " / " + timing.Ms(c.iso.P95())
		}
		fmt.Fprintf(&out, "%-54s %8s / %8s %6.2fx %6.2fx %8s %8s %8s %19s\n", c.name, timing.Ms(c.total.Median()), timing.Ms(c.total.P95()), ratio, paired,
			timing.Ms(c.create.Median()), timing.Ms(c.start.Median()), timing.Ms(c.delete.Median()), iso)
	}
	find := func(group, name string) *lcContender {
		for _, c := range cs {
			if strings.HasPrefix(c.group, group) && c.name == name {
				return c
			}
		}
		return nil
	}
	s4, s256 := find("docker", "sforge-runtime, nftables, 4"), find("docker", "sforge-runtime, nftables, 256")
	r4, r256 := find("docker", "sforge-runtime, nftables, 4, no NET_RAW (sforge run)"), find("docker", "sforge-runtime, nftables, 256, no NET_RAW (sforge run)")
	h4, h256 := find("podman", "runc + sforge-hook, nftables, 4"), find("podman", "runc + sforge-hook, nftables, 256")
	seed4, seed256 := find("docker", "runc + seed (exec per rule), 4"), find("docker", "runc + seed (exec per rule), 256")
	seedSudo4 := find("docker", "runc + seed as run (sudo -n per rule), 4")
	if s4 == nil || s256 == nil || r4 == nil || r256 == nil || h4 == nil || h256 == nil || seed4 == nil || seed256 == nil {
		fmt.Print(out.String())
		return
	}
	floor := func(c *lcContender) string {
		if c == nil {
			return ""
		}
		return fmt.Sprintf("; its floor %.2fx (paired %.2fx)", timing.Ratio(c.total, c.base.total), timing.PairedRatio(c.total, c.base.total))
	}
	fmt.Fprintf(&out, "\ntargets (issue 9), nftables engine:\n")
	fmt.Fprintf(&out, "  shim path, 4 entries:          %.2fx plain runc, paired %.2fx (target <= 1.15x)%s\n", timing.Ratio(s4.total, s4.base.total), timing.PairedRatio(s4.total, s4.base.total),
		floor(find("docker", "Go exec wrapper (floor), no allowlist")))
	fmt.Fprintf(&out, "  shim path, as sforge run, 4:   %.2fx plain runc, paired %.2fx (target <= 1.15x; no CAP_NET_RAW, the C front's create)\n",
		timing.Ratio(r4.total, r4.base.total), timing.PairedRatio(r4.total, r4.base.total))
	fmt.Fprintf(&out, "  hooks.d path, 4 entries:       %.2fx plain runc, paired %.2fx (target <= 1.10x)%s\n", timing.Ratio(h4.total, h4.base.total), timing.PairedRatio(h4.total, h4.base.total),
		floor(find("podman", "runc + empty Go hook (floor), createRuntime")))
	fmt.Fprintf(&out, "  256 / 4 entries, lifecycle:    shim %.2fx (paired %.2fx), as sforge run %.2fx (paired %.2fx), hooks.d %.2fx (paired %.2fx) (target <= 1.15x)\n",
		timing.Ratio(s256.total, s4.total), timing.PairedRatio(s256.total, s4.total), timing.Ratio(r256.total, r4.total), timing.PairedRatio(r256.total, r4.total),
		timing.Ratio(h256.total, h4.total), timing.PairedRatio(h256.total, h4.total))
	fmt.Fprintf(&out, "  seed / shim isolation time:    %.1fx at 4 entries, %.1fx at 256 (target >= 20x)\n", timing.Ratio(seed4.iso, s4.iso), timing.Ratio(seed256.iso, s256.iso))
	if seedSudo4 != nil {
		fmt.Fprintf(&out, "  seed as run (sudo -n) / shim:  %.1fx at 4 entries; / hook %.1fx\n", timing.Ratio(seedSudo4.iso, s4.iso), timing.Ratio(seedSudo4.iso, h4.iso))
	}
	fmt.Fprintf(&out, "  seed / hook isolation time:    %.1fx at 4 entries, %.1fx at 256\n", timing.Ratio(seed4.iso, h4.iso), timing.Ratio(seed256.iso, h256.iso))
	fmt.Fprintf(&out, "  added to the lifecycle:        shim %s ms, hooks.d %s ms, seed %s ms (4 entries; medians' difference)\n",
		timing.Ms(s4.total.Median()-s4.base.total.Median()), timing.Ms(h4.total.Median()-h4.base.total.Median()), timing.Ms(seed4.total.Median()-seed4.base.total.Median()))
	fmt.Print(out.String())
	b.ReportMetric(timing.Ratio(s4.total, s4.base.total), "shim-nft4/plain")
	b.ReportMetric(timing.PairedRatio(s4.total, s4.base.total), "shim-nft4/plain-paired")
	b.ReportMetric(timing.Ratio(r4.total, r4.base.total), "shim-run-nft4/plain")
	b.ReportMetric(timing.Ratio(h4.total, h4.base.total), "hook-nft4/plain")
	b.ReportMetric(timing.PairedRatio(h4.total, h4.base.total), "hook-nft4/plain-paired")
	b.ReportMetric(timing.Ratio(s256.total, s4.total), "shim-256/4")
	b.ReportMetric(timing.Ratio(seed4.iso, s4.iso), "seed/shim-iso-4")
}

// nftTables lists the inet tables sforge made in a namespace.
func nftTables(tb testing.TB, n ns.NetNS) string {
	var names []string
	err := n.Do(func(ns.NetNS) error {
		c, err := nft.New()
		if err != nil {
			return err
		}
		ts, err := c.ListTablesOfFamily(nft.TableFamilyINet)
		for _, t := range ts {
			if strings.HasPrefix(t.Name, "SFORGE") {
				names = append(names, t.Name)
			}
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return strings.Join(names, "\n")
}

// cleanEnv is the benchmark's environment without the sforge settings a
// developer may have exported.
func cleanEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		switch k {
		case engines.EnvVar, "SFORGE_RUNTIME_CONFIG", "SFORGE_RUNC", "SFORGE_HOOK_LOG", priority.EnvVar:
			continue
		}
		env = append(env, e)
	}
	return env
}

// loadAvg is the 1-minute load average.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// hookKeeperEnv runs the benchmarks on a host whose netfilter hooks are in
// use. By default the host is left as it is; on a host where no namespace
// uses a netfilter hook (a bare CI machine), every isolated container
// turns the kernel's hook static keys on when its rules go in and off
// when its namespace dies, a code patch with cross-CPU interrupts each way
// (BENCHMARKS.md, "Fifth round"). Our table is inet and matches conntrack
// state, so the kernel tracks both IPv4 and IPv6 connections in the
// container's namespace (nf_ct_netns_get for NFPROTO_INET), whatever
// family the rule is for.
//
//   - 1 (or docker): a test namespace holds the rules Docker 20.10 writes
//     at start (testdata/docker-20.10-host.rules: IPv4 filter and NAT,
//     hence IPv4 connection tracking) for the whole run, as on any Docker
//     host.
//   - all: the same, and a stateful IPv6 host firewall
//     (testdata/ipv6-stateful-host.rules, as ufw, firewalld or Docker with
//     ip6tables enabled have): every hook an isolated container uses is
//     then in use elsewhere.
const hookKeeperEnv = "SFORGE_BENCH_HOOKS_IN_USE"

// hostHooks sets up what hookKeeperEnv asks for and says which host the
// run measures.
func hostHooks(b *testing.B) string {
	type ruleset struct{ file, restore string }
	docker := ruleset{"docker-20.10-host.rules", "iptables-restore"}
	ipv6 := ruleset{"ipv6-stateful-host.rules", "ip6tables-restore"}
	var load []ruleset
	var host string
	switch v := os.Getenv(hookKeeperEnv); v {
	case "":
		return "as it is (" + hookKeeperEnv + "=docker: with Docker's host rules in a test namespace; =all: and IPv6 conntrack)"
	case "1", "docker":
		load = []ruleset{docker}
		host = "Docker 20.10's host rules in a test namespace (" + hookKeeperEnv + "=" + v + ": netfilter hooks and IPv4 conntrack in use, as on a Docker host)"
	case "all":
		load = []ruleset{docker, ipv6}
		host = "Docker 20.10's host rules and a stateful IPv6 firewall in a test namespace (" + hookKeeperEnv + "=all: every hook an isolated container uses is in use)"
	default:
		b.Fatalf("%s=%q: want docker (or 1), all, or nothing", hookKeeperEnv, v)
	}
	keeper := testenv.NewNetNS(b)
	nsenter := testenv.RequireBinary(b, "nsenter")
	for _, r := range load {
		rules, err := os.Open(filepath.Join("testdata", r.file))
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(nsenter, "--net="+keeper.Path(), testenv.RequireBinary(b, r.restore))
		cmd.Stdin = rules
		out, err := cmd.CombinedOutput()
		rules.Close()
		if err != nil {
			b.Fatalf("%s: loading %s into %s: %v\n%s", hookKeeperEnv, r.file, keeper.Path(), err, out)
		}
	}
	return host
}
