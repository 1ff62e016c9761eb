//go:build cgo

package front

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/engine/priority"
	"github.com/sforge-dev/netiso/hook"
	"github.com/sforge-dev/netiso/policy"
)

func TestEnginesMatchGo(t *testing.T) {
	for _, e := range engines.Names {
		if !args([]string{"poststop", "--engine", e}) {
			t.Errorf("the front does not accept engine %q: update internal/cfront/cfront.h", e)
		}
	}
}

var argsCases = []struct {
	args []string
	ok   bool
}{
	{[]string{"poststop"}, true},
	{[]string{"poststop", "--log", "/var/log/x.log"}, true},
	{[]string{"poststop", "--log=/x", "--engine=nftables"}, true},
	{[]string{"poststop", "--engine", "iptables-legacy", "--log", "/x", "--log", "/y"}, true},
	{[]string{"poststop", "--log="}, false},
	{[]string{"poststop", "--log"}, false},
	{[]string{"poststop", "--engine", "pf"}, false},
	{[]string{"poststop", "-log", "/x"}, false},
	{[]string{"poststop", "--debug"}, false},
	{[]string{"poststop", "x"}, false},
	{[]string{"createRuntime"}, false},
	{[]string{"createRuntime", "--engine=nftables", "--log", "/x"}, false},
	{[]string{"prestart", "--engine", "iptables"}, false},
	{[]string{"prestart", "--engine"}, false},
	{[]string{"CreateRuntime"}, false},
	{[]string{"hold-netlink"}, false},
	{[]string{"Poststop"}, false},
	{[]string{}, false},
	{[]string{""}, false},
}

func TestArgs(t *testing.T) {
	t.Setenv(engines.EnvVar, "")
	for _, c := range argsCases {
		if got := args(c.args); got != c.ok {
			t.Errorf("args(%q) = %v, want %v", c.args, got, c.ok)
		}
		checkArgsAgree(t, c.args)
	}
	t.Setenv(hook.LogEnv, "/from/env.log")
	t.Setenv(engines.EnvVar, engines.IPTablesLegacy)
	for _, c := range argsCases {
		checkArgsAgree(t, c.args)
	}
	t.Setenv(engines.EnvVar, "bogus")
	if args([]string{"poststop"}) {
		t.Errorf("the front takes a poststop with %s=bogus, which the Go hook logs as an error", engines.EnvVar)
	}
	t.Setenv(engines.EnvVar, "nftables")
	if !args([]string{"poststop"}) {
		t.Errorf("the front does not take a poststop with %s=nftables", engines.EnvVar)
	}
	// The install priority: the front takes what the Go hook reads, and
	// leaves it the values it reports.
	for _, p := range []string{"", "realtime", "normal", "Normal", "high"} {
		t.Setenv(priority.EnvVar, p)
		for _, a := range [][]string{{"createRuntime"}, {"poststop"}} {
			checkArgsAgree(t, a)
			stage, _, _, realtime := opts(a)
			known := p == "" || p == priority.Realtime || p == priority.Normal
			if (stage != "") != known || (known && realtime != (p != priority.Normal)) {
				t.Errorf("%s=%q, %q: the front takes stage %q, real-time %v", priority.EnvVar, p, a, stage, realtime)
			}
		}
	}
}

// checkArgsAgree: what the front takes, the Go hook reads as a poststop
// without error.
func checkArgsAgree(t *testing.T, a []string) {
	t.Helper()
	stage, engine, log, realtime := opts(a)
	if (stage == "poststop") != args(a) {
		t.Fatalf("%q: the front's stage %q, its poststop test %v", a, stage, args(a))
	}
	if stage == "" {
		return
	}
	o, err := hook.ParseArgs(a, os.Getenv)
	want := map[string]string{hook.StagePoststop: "poststop", hook.StageCreateRuntime: "install", hook.StagePrestart: "install"}[o.Stage]
	if err != nil || stage != want || engine != o.Engine || log != o.LogPath || realtime != (o.InstallPriority == priority.Realtime) {
		t.Fatalf("the front reads %q as %s, engine %q, log %q, real-time %v; the Go hook as stage %q, engine %q, log %q, priority %q, error %v",
			a, stage, engine, log, realtime, o.Stage, o.Engine, o.LogPath, o.InstallPriority, err)
	}
}

func FuzzArgs(f *testing.F) {
	for _, c := range argsCases {
		f.Add(strings.Join(c.args, "\x00"))
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkArgsAgree(t, strings.Split(s, "\x00"))
	})
}

var stateCases = []struct {
	in     string
	bundle string // "" when the front must not be sure
}{
	{`{"ociVersion":"1.0.2","id":"c1","status":"stopped","pid":0,"bundle":"/run/b"}`, "/run/b"},
	{" {\n \"id\" : \"c1\" , \"bundle\" : \"/\" , \"annotations\" : {\"a\":[1,2.5e-3,true,null,{}]}}\n", "/"},
	{`{"id":"c1","bundle":"/run/b","pid":4242,"extra":{"x":[]}}`, "/run/b"},
	{`{"id":"c1","bundle":"/run/b","pid":-0}`, "/run/b"},
	{`{"id":"","bundle":"/run/b"}`, ""},
	{`{"bundle":"/run/b"}`, ""},
	{`{"id":"c1","bundle":"run/b"}`, ""},
	{`{"id":"c1","bundle":"/run/b/"}`, ""},
	{`{"id":"c1","bundle":"/run/../b"}`, ""},
	{`{"id":"c1","bundle":"/run/b","pid":-1}`, ""},
	{`{"id":"c1","bundle":"/run/b","pid":1.0}`, ""},
	{`{"id":"c1","bundle":"/run/b","pid":"1"}`, ""},
	{`{"id":"c1","bundle":"/run/b","pid":null}`, ""},
	{`{"id":"c1","bundle":null}`, ""},
	{`{"id":1,"bundle":"/run/b"}`, ""},
	{`{"id":"c1","Bundle":"/run/b"}`, ""},
	{`{"id":"c1","bundle":"/run/b","BUNDLE":"/x"}`, ""},
	{`{"id":"c1","bundle":"/run/b","bundle":"/x"}`, ""},
	{`{"ID":"c1","bundle":"/run/b"}`, ""},
	{`{"id":"c1","bundle":"/r\u00e9"}`, ""},
	{`{"id":"c1","bundle":"/r\\b"}`, ""},
	{"{\"id\":\"c1\",\"bundle\":\"/r\xc3\xa9\"}", ""},
	{"{\"id\":\"c1\",\"bundle\":\"/r\xff\"}", ""},
	{"{\"id\":\"c1\",\"bundle\":\"/r\tb\"}", ""},
	{"{\"id\":\"c1\",\"\xc5\xbftatus\":\"x\",\"bundle\":\"/b\"}", ""},
	{`{"id":"c1","bundle":"/run/b",}`, ""},
	{`{"id":"c1","bundle":"/run/b"} x`, ""},
	{`{"id":"c1","bundle":"/run/b","x":01}`, ""},
	{`{"id":"c1","bundle":"/run/b","x":tru}`, ""},
	{`{"id":"c1","bundle":"/run/b","x":[1,]}`, ""},
	{`{"id":"c1","bundle":"/run/b","x":-}`, ""},
	{`{"id":"c1","bundle":"/run/b","x":1.}`, ""},
	{`null`, ""},
	{``, ""},
	{"\xef\xbb\xbf{\"id\":\"c1\",\"bundle\":\"/b\"}", ""},
	{`{"id":"c1","bundle":"/run/b","x":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`, ""},
}

func TestState(t *testing.T) {
	for _, c := range stateCases {
		bundle, ok := state([]byte(c.in))
		if want := c.bundle != ""; ok != want || bundle != c.bundle {
			t.Errorf("state(%q) = %q, %v; want %q, %v", c.in, bundle, ok, c.bundle, want)
		}
		checkStateAgrees(t, []byte(c.in))
	}
}

// checkStateAgrees: where the front is sure of the bundle, the Go hook
// reads the state without error and the same bundle.
func checkStateAgrees(t *testing.T, b []byte) {
	t.Helper()
	bundle, ok := state(b)
	if !ok {
		return
	}
	st, err := hook.ReadState(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the front reads %q, the Go hook fails: %v", b, err)
	}
	if st.Bundle != bundle || filepath.Join(st.Bundle, "config.json") != strings.TrimSuffix(bundle, "/")+"/config.json" {
		t.Fatalf("%q: the front reads bundle %q, the Go hook %q", b, bundle, st.Bundle)
	}
}

func FuzzState(f *testing.F) {
	for _, c := range stateCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkStateAgrees(t, b) })
}

type specCase struct {
	in   string
	ok   bool
	net  bool
	path string
}

var specCases = []specCase{
	{`{"ociVersion":"1.0.2","linux":{"namespaces":[{"type":"pid"},{"type":"network"}]}}`, true, true, ""},
	{`{"linux":{"namespaces":[{"type":"network","path":"/run/netns/x"},{"type":"network","path":"/y"}]}}`, true, true, "/run/netns/x"},
	{`{"linux":{"namespaces":[null,{"type":"network","path":null}]}}`, true, true, ""},
	{`{"linux":{"namespaces":[{"path":"/x","type":"network","extra":[1]}]}}`, true, true, "/x"},
	{`{"linux":{"namespaces":[{"type":"pid"}]}}`, true, false, ""},
	{`{"linux":{"namespaces":null}}`, true, false, ""},
	{`{"linux":null,"process":null,"annotations":null,"ociVersion":null}`, true, false, ""},
	{`{}`, true, false, ""},
	{`{"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:443","b":null,"b":"dup keys are fine in a map"},
	  "process":{"env":["A=1",null],"args":["x",1],"capabilities":{"bounding":["CAP_KILL"],"ambient":null,"other":3}},
	  "linux":{"seccomp":{"x":[{}]},"namespaces":[{"type":"network","path":"/proc/1/ns/net"}]}}`, true, true, "/proc/1/ns/net"},
	{"{\"linux\":{\"namespaces\":[{\"type\":\"network\",\"path\":\"/r\xc3\xa9\"}]}}", false, false, ""},
	{`{"linux":{"namespaces":[{"type":"network","path":"/a\/b"}]}}`, false, false, ""},
	{`{"linux":{"namespaces":[{"type":"network","Path":"/x"}]}}`, false, false, ""},
	{`{"linux":{"namespaces":[{"type":"network","path":"/x","path":"/y"}]}}`, false, false, ""},
	{`{"linux":{"Namespaces":[]}}`, false, false, ""},
	{`{"Linux":{}}`, false, false, ""},
	{`{"linux":{},"linux":{}}`, false, false, ""},
	{`{"linux":{"namespaces":[{"type":1}]}}`, false, false, ""},
	{`{"linux":{"namespaces":{"type":"network"}}}`, false, false, ""},
	{`{"linux":{"namespaces":["network"]}}`, false, false, ""},
	{`{"linux":[]}`, false, false, ""},
	{`{"annotations":{"a":1}}`, false, false, ""},
	{`{"annotations":[]}`, false, false, ""},
	{`{"process":{"env":"A=1"}}`, false, false, ""},
	{`{"process":{"env":[1]}}`, false, false, ""},
	{`{"process":{"capabilities":{"bounding":"CAP_KILL"}}}`, false, false, ""},
	{`{"process":{"capabilities":{"Bounding":[]}}}`, false, false, ""},
	{`{"process":{"Env":[]}}`, false, false, ""},
	{`{"process":[]}`, false, false, ""},
	{`{"ociVersion":1}`, false, false, ""},
	{`{"OCIVERSION":"1"}`, false, false, ""},
	{`{"linux":{"namespaces":[]}} {}`, false, false, ""},
	{`{"linux":{"namespaces":[],}}`, false, false, ""},
	{`[]`, false, false, ""},
	{`null`, false, false, ""},
	{``, false, false, ""},
}

func TestSpec(t *testing.T) {
	for _, c := range specCases {
		net, path, ok := spec([]byte(c.in))
		if ok != c.ok || net != c.net || path != c.path {
			t.Errorf("spec(%q) = %v, %q, %v; want %v, %q, %v", c.in, net, path, ok, c.net, c.path, c.ok)
		}
		checkSpecAgrees(t, []byte(c.in))
	}
}

// TestSpecReadsEngineSpecs: the config.json files Docker and podman wrote
// on this kind of machine (bench/testdata) are ones the front is sure of.
func TestSpecReadsEngineSpecs(t *testing.T) {
	for _, name := range []string{"docker-20.10-config.json", "podman-4.3-config.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "bench", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if net, _, ok := spec(b); !ok || !net {
			t.Errorf("%s: the front reads net=%v ok=%v, want a network namespace read for sure", name, net, ok)
		}
		checkSpecAgrees(t, b)
	}
}

// checkSpecAgrees: where the front is sure, the Go hook decodes the spec
// without error and finds the same network namespace.
func checkSpecAgrees(t *testing.T, b []byte) {
	t.Helper()
	net, path, ok := spec(b)
	if !ok {
		return
	}
	s, err := hook.ParseSpec(b)
	if err != nil {
		t.Fatalf("the front reads %q, the Go hook fails: %v", b, err)
	}
	var n *specs.LinuxNamespace
	if s.Linux != nil {
		for i := range s.Linux.Namespaces {
			if s.Linux.Namespaces[i].Type == specs.NetworkNamespace {
				n = &s.Linux.Namespaces[i]
				break
			}
		}
	}
	if net != (n != nil) || (n != nil && n.Path != path) {
		t.Fatalf("%q: the front reads net=%v path %q, the Go hook %+v", b, net, path, n)
	}
}

func FuzzSpec(f *testing.F) {
	for _, c := range specCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSpecAgrees(t, b) })
}

// spyEngine fails the test when the hook asks anything of its engine.
type spyEngine struct{ t *testing.T }

func (s spyEngine) Name() string { return "spy" }
func (s spyEngine) Install(engine.Target, policy.Allowlist) (engine.Report, error) {
	s.t.Fatal("the hook installed rules")
	return engine.Report{}, nil
}
func (s spyEngine) Remove(engine.Target) error {
	s.t.Fatal("the hook removed rules where the front saw nothing to do")
	return nil
}
func (s spyEngine) Check(engine.Target, policy.Allowlist) error { return nil }

// TestIdle runs the front's whole decision on bundles in a temporary
// directory, and the Go hook's poststop on the same: where the front ends
// the poststop, the Go hook does nothing and logs nothing.
func TestIdle(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "netns")
	if err := os.WriteFile(present, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const allow = `"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:443"}`
	for _, c := range []struct {
		name, spec string // spec "" for no config.json
		idle       bool
	}{
		{"private namespace", `{` + allow + `,"linux":{"namespaces":[{"type":"network"}]}}`, true},
		{"no network namespace", `{` + allow + `,"linux":{"namespaces":[{"type":"pid"}]}}`, true},
		{"namespace path gone", `{` + allow + `,"linux":{"namespaces":[{"type":"network","path":"` + dir + `/gone"}]}}`, true},
		{"namespace path present", `{` + allow + `,"linux":{"namespaces":[{"type":"network","path":"` + present + `"}]}}`, false},
		{"path under a file", `{` + allow + `,"linux":{"namespaces":[{"type":"network","path":"` + present + `/x"}]}}`, false},
		{"malformed config.json", `{` + allow + `,"linux":{"namespaces":[{"type":"network"}]}`, false},
		{"no config.json", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			bundle := t.TempDir()
			if c.spec != "" {
				if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(c.spec), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			st := []byte(`{"ociVersion":"1.0.2","id":"c1","status":"stopped","bundle":"` + bundle + `"}`)
			if got := idle(st); got != c.idle {
				t.Fatalf("idle = %v, want %v", got, c.idle)
			}
			if !c.idle {
				return
			}
			log := filepath.Join(t.TempDir(), "hook.log")
			h := &hook.Hook{Engine: spyEngine{t}, Log: &hook.Logger{Path: log}}
			if err := h.Run(hook.StagePoststop, bytes.NewReader(st)); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(log); !os.IsNotExist(err) {
				t.Fatalf("the front ends this poststop, but the Go hook logged %q (%v)", b, err)
			}
		})
	}
}

// recordingEngine records what the Go hook asks its engine to install.
type recordingEngine struct {
	t      *testing.T
	target *engine.Target
	allow  policy.Allowlist
}

func (r *recordingEngine) Name() string { return "recording" }
func (r *recordingEngine) Install(t engine.Target, a policy.Allowlist) (engine.Report, error) {
	r.target, r.allow = &t, a
	return engine.Report{Engine: "recording"}, nil
}
func (r *recordingEngine) Remove(engine.Target) error {
	r.t.Fatal("a createRuntime removed rules")
	return nil
}
func (r *recordingEngine) Check(engine.Target, policy.Allowlist) error { return nil }

// decideCases are config.json files for a createRuntime; want is the
// front's decision for the engine "auto".
var decideCases = []struct {
	name, spec string
	want       int
}{
	{"annotation", `{"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:443;dns:10.0.0.2"},` + decideProcess + `,` + decideLinux + `}`, decideInstall},
	{"env", `{"process":{"env":["PATH=/bin","SFORGE_EGRESS=v1;udp:10.0.0.0/8:53;else:drop"],` + decideCaps + `},` + decideLinux + `}`, decideInstall},
	{"env twice, same", `{"process":{"env":["SFORGE_EGRESS=v1;tcp:1.2.3.4:1","SFORGE_EGRESS=v1;tcp:1.2.3.4:1"],` + decideCaps + `},` + decideLinux + `}`, decideInstall},
	{"annotation wins over env", `{"annotations":{"sforge.io/egress":"v1"},"process":{"env":["SFORGE_EGRESS=bad","SFORGE_EGRESS=worse"],` + decideCaps + `},` + decideLinux + `}`, decideGo},
	{"annotation and env", `{"annotations":{"sforge.io/egress":"v1"},"process":{"env":["SFORGE_EGRESS=v1;tcp:1.2.3.4:1"],` + decideCaps + `},` + decideLinux + `}`, decideInstall},
	{"empty allowlist", `{"annotations":{"sforge.io/egress":"v1"},` + decideProcess + `,` + decideLinux + `}`, decideInstall},
	{"namespace with a path", `{"annotations":{"sforge.io/egress":"v1"},` + decideProcess + `,"linux":{"namespaces":[{"type":"network","path":"/run/netns/x"}]}}`, decideInstall},
	{"not isolated", `{` + decideProcess + `,` + decideLinux + `}`, decideNothing},
	{"not isolated, no process", `{}`, decideNothing},
	{"other annotations", `{"annotations":{"sforge.io/egres":"v1","Sforge.io/egress":"v1"},` + decideProcess + `}`, decideNothing},
	{"env prefix only", `{"process":{"env":["SFORGE_EGRESS","SFORGE_EGRESSX=v1"]}}`, decideNothing},
	{"env twice, different", `{"process":{"env":["SFORGE_EGRESS=v1","SFORGE_EGRESS=v1;else:drop"],` + decideCaps + `},` + decideLinux + `}`, decideGo},
	{"annotation twice", `{"annotations":{"sforge.io/egress":"v1","sforge.io/egress":"v1"},` + decideProcess + `,` + decideLinux + `}`, decideGo},
	{"annotation null", `{"annotations":{"sforge.io/egress":null},` + decideProcess + `,` + decideLinux + `}`, decideGo},
	{"annotation escaped", `{"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:\u0034"},` + decideProcess + `,` + decideLinux + `}`, decideGo},
	{"invalid allowlist", `{"annotations":{"sforge.io/egress":"v2"},` + decideProcess + `,` + decideLinux + `}`, decideGo},
	{"no network namespace", `{"annotations":{"sforge.io/egress":"v1"},` + decideProcess + `,"linux":{"namespaces":[{"type":"pid"}]}}`, decideGo},
	{"no linux", `{"annotations":{"sforge.io/egress":"v1"},` + decideProcess + `}`, decideGo},
	{"no process", `{"annotations":{"sforge.io/egress":"v1"},` + decideLinux + `}`, decideGo},
	{"no capabilities", `{"annotations":{"sforge.io/egress":"v1"},"process":{},` + decideLinux + `}`, decideGo},
	{"capabilities null", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":null},` + decideLinux + `}`, decideGo},
	{"empty capabilities", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{}},` + decideLinux + `}`, decideInstall},
	{"NET_ADMIN", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"ambient":["CAP_NET_ADMIN"]}},` + decideLinux + `}`, decideGo},
	{"net_raw", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"bounding":[" net_raw "]}},` + decideLinux + `}`, decideGo},
	{"cap_sys_admin", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"permitted":["cap_sys_admin"]}},` + decideLinux + `}`, decideGo},
	{"dotless i", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"effective":["CAP_NET_ADMİN","cap_net_admın"]}},` + decideLinux + `}`, decideGo},
	{"capability not forbidden", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"effective":["CAP_CAP_NET_ADMIN","NET_ADMINX","CAP_NET_BIND_SERVICE",null]}},` + decideLinux + `}`, decideInstall},
	{"malformed", `{"annotations":{"sforge.io/egress":"v1"},` + decideProcess + `,` + decideLinux, decideGo},
	{"escaped argument", `{"annotations":{"sforge.io/egress":"v1","note":"\u003c"},"process":{"args":["sh","-c","a \u0026\u0026 b"],` + decideCaps + `},` + decideLinux + `}`, decideInstall},
	{"escaped annotation name", `{"annotations":{"sforge.io/egress":"v1","sforge.io\/egress":"v1;else:drop"},` + decideProcess + `,` + decideLinux + `}`, decideGo},
	{"invalid escape", `{"annotations":{"sforge.io/egress":"v1"},"process":{"args":["\q"],` + decideCaps + `},` + decideLinux + `}`, decideGo},
	// Environment entries with escapes: not ours unless what comes
	// before the first escape is, or begins, SFORGE_EGRESS=.
	{"escaped environment", `{"process":{"env":["Q=a\nb \u0026 c","SFORGE_EGRESS=v1"],` + decideCaps + `},` + decideLinux + `}`, decideInstall},
	{"environment not ASCII", `{"process":{"env":["Q=向评测服务器问好。\n","SFORGE_EGRESS=v1"],` + decideCaps + `},` + decideLinux + `}`, decideInstall},
	{"escaped environment, not isolated", `{"process":{"env":["Q=a\nb"],` + decideCaps + `},` + decideLinux + `}`, decideNothing},
	{"escaped allowlist name", `{"process":{"env":["SFORGE\u005fEGRESS=v1;else:drop"],` + decideCaps + `},` + decideLinux + `}`, decideGo},
	{"escaped allowlist", `{"process":{"env":["SFORGE_EGRESS=v1;tcp:1.2.3.4:\u0034"],` + decideCaps + `},` + decideLinux + `}`, decideGo},
}

const (
	decideCaps    = `"capabilities":{"bounding":["CAP_CHOWN","CAP_KILL"],"effective":["CAP_CHOWN"]}`
	decideProcess = `"process":{"env":["PATH=/bin"],` + decideCaps + `}`
	decideLinux   = `"linux":{"namespaces":[{"type":"pid"},{"type":"network"}]}`
)

func TestDecide(t *testing.T) {
	for _, c := range decideCases {
		t.Run(c.name, func(t *testing.T) {
			d := checkDecideAgrees(t, []byte(c.spec), engines.Auto)
			if d.kind != c.want {
				t.Fatalf("decision %d, want %d", d.kind, c.want)
			}
			// The Go hook logs why the front left it the install.
			d = decide(decideState(t, []byte(c.spec), "decide-why"), engines.Auto, nil)
			if why := Left(); (d.kind == decideGo) != (why != "") {
				t.Fatalf("decision %d with reason %q: every decision for Go has one, no other", d.kind, why)
			}
		})
	}
	decide(decideState(t, []byte(decideCases[0].spec), "decide-why"), engines.IPTables, nil)
	if why := Left(); why != "an iptables engine" {
		t.Fatalf("reason %q for an iptables engine", why)
	}
	checkEngines(t, func(e string) int { return checkDecideAgrees(t, []byte(decideCases[0].spec), e).kind }, decideGo, decideInstall)
}

// checkEngines runs check, a decision on a spec the front takes, with each
// engine: the iptables ones are the Go hook's (goKind), nftables the
// front's (want).
func checkEngines(t *testing.T, check func(engine string) int, goKind, want int) {
	t.Helper()
	for _, e := range []string{engines.IPTables, engines.IPTablesNFT, engines.IPTablesLegacy} {
		if k := check(e); k != goKind {
			t.Errorf("engine %s: decision %d, want the Go hook's", e, k)
		}
	}
	if k := check(engines.NFTables); k != want {
		t.Errorf("engine nftables: decision %d, want %d", k, want)
	}
}

// TestDecideSharedNamespace: a container in one of the host's namespaces
// is the Go hook's to refuse.
func TestDecideSharedNamespace(t *testing.T) {
	st := decideState(t, []byte(decideCases[0].spec), "c1")
	if d := decide(st, engines.Auto, []string{"/proc/self/ns/net"}); d.kind != decideGo {
		t.Fatalf("decision %d for a container in the hook's own namespace, want the Go hook's", d.kind)
	}
	if d := decide(st, engines.Auto, []string{"/proc/1/ns/net", "/nonexistent"}); d.kind != decideGo {
		t.Fatalf("decision %d with an unreadable host namespace, want the Go hook's (sharesNetNS fails)", d.kind)
	}
}

// TestDecideEngineSpecs: the config.json files Docker and podman wrote on
// this kind of machine, with an allowlist and without CAP_NET_RAW (both
// grant it by default; `sforge run` drops it), are ones the front installs.
func TestDecideEngineSpecs(t *testing.T) {
	for _, name := range []string{"docker-20.10-config.json", "podman-4.3-config.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "bench", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.Replace(b, []byte(`"env": [`), []byte(`"env": ["SFORGE_EGRESS=v1;tcp:10.1.2.3:443",`), 1)
		if d := checkDecideAgrees(t, b, engines.Auto); d.kind != decideGo {
			t.Errorf("%s with CAP_NET_RAW: decision %d, want the Go hook's refusal", name, d.kind)
		}
		b = regexp.MustCompile(`"CAP_NET_RAW",\s*`).ReplaceAll(b, nil)
		if d := checkDecideAgrees(t, b, engines.Auto); d.kind != decideInstall {
			t.Errorf("%s: decision %d, want an install", name, d.kind)
		}
	}
}

// decideState writes spec as a bundle's config.json and returns a state
// naming it, with this process's pid.
func decideState(t *testing.T, spec []byte, id string) []byte {
	bundle := t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	return []byte(fmt.Sprintf(`{"ociVersion":"1.0.2","id":%q,"status":"creating","pid":%d,"bundle":%q}`, id, os.Getpid(), bundle))
}

// checkDecideAgrees runs the front's decision and the Go hook's
// createRuntime on the same state and config.json: where the front
// decides, the Go hook accepts the container and installs the same
// allowlist in the same namespace (or touches and logs nothing).
func checkDecideAgrees(t *testing.T, spec []byte, engineName string) decision {
	t.Helper()
	const id = "0123456789abcdef"
	st := decideState(t, spec, id)
	d := decide(st, engineName, nil)
	if d.kind == decideGo {
		return d
	}
	rec := &recordingEngine{t: t}
	log := filepath.Join(t.TempDir(), "hook.log")
	h := &hook.Hook{Engine: rec, Log: &hook.Logger{Path: log}, HostNetNS: []string{}}
	if err := h.Run(hook.StageCreateRuntime, bytes.NewReader(st)); err != nil {
		t.Fatalf("the front decides %d for %q, the Go hook refuses: %v", d.kind, spec, err)
	}
	switch d.kind {
	case decideNothing:
		if rec.target != nil {
			t.Fatalf("the front sees no allowlist in %q, the Go hook installs %+v", spec, rec.allow)
		}
		if b, err := os.ReadFile(log); !os.IsNotExist(err) {
			t.Fatalf("the front sees no allowlist in %q, the Go hook logged %q (%v)", spec, b, err)
		}
	case decideInstall:
		if rec.target == nil {
			t.Fatalf("the front installs for %q, the Go hook does not", spec)
		}
		want := engine.Target{NetNS: fmt.Sprintf("/proc/%d/ns/net", os.Getpid()), ID: id}
		if *rec.target != want || d.netns != want.NetNS || d.id != id {
			t.Fatalf("the front installs in %s for %s, the Go hook in %+v", d.netns, d.id, *rec.target)
		}
		if !d.allow.Equal(rec.allow) {
			t.Fatalf("%q: the front installs %+v, the Go hook %+v", spec, d.allow, rec.allow)
		}
		requireTableName(t, id, d.table)
	default:
		t.Fatalf("unknown decision %d", d.kind)
	}
	return d
}

// requireTableName fails unless the front names id's table as the Go
// engine does.
func requireTableName(t *testing.T, id, table string) {
	t.Helper()
	if want, err := policy.ChainName(id); err != nil || table != want {
		t.Fatalf("the front names the table %q, the Go engine %q (%v)", table, want, err)
	}
}

func FuzzDecide(f *testing.F) {
	for _, c := range decideCases {
		f.Add([]byte(c.spec))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecideAgrees(t, b, engines.Auto) })
}

// removeRecorder records what the Go hook asks its engine to remove.
type removeRecorder struct {
	t      *testing.T
	target *engine.Target
}

func (r *removeRecorder) Name() string { return "recording" }
func (r *removeRecorder) Install(engine.Target, policy.Allowlist) (engine.Report, error) {
	r.t.Fatal("a poststop installed rules")
	return engine.Report{}, nil
}
func (r *removeRecorder) Remove(t engine.Target) error {
	r.target = &t
	return nil
}
func (r *removeRecorder) Check(engine.Target, policy.Allowlist) error { return nil }

// removeCases are config.json files for a poststop; @NS@ stands for a
// namespace path that exists, @GONE@ for one that does not. want is the
// front's decision for the engine "auto".
var removeCases = []struct {
	name, spec string
	want       int
}{
	{"annotation, namespace by path", `{"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:443"},` + removeByPath + `}`, removeTable},
	{"env, namespace by path", `{"process":{"env":["SFORGE_EGRESS=v1;udp:10.0.0.0/8:53;else:drop"]},` + removeByPath + `}`, removeTable},
	{"capabilities are not a poststop's", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"bounding":["CAP_NET_ADMIN"]}},` + removeByPath + `}`, removeTable},
	{"escaped argument", `{"annotations":{"sforge.io/egress":"v1"},"process":{"args":["sh","-c","a \u0026\u0026 b"]},` + removeByPath + `}`, removeTable},
	{"private namespace", `{"annotations":{"sforge.io/egress":"v1"},"linux":{"namespaces":[{"type":"network"}]}}`, removeNothing},
	{"no network namespace", `{"annotations":{"sforge.io/egress":"v1"},"linux":{"namespaces":[{"type":"pid"}]}}`, removeNothing},
	{"namespace path gone", `{"annotations":{"sforge.io/egress":"v1"},"linux":{"namespaces":[{"type":"network","path":"@GONE@"}]}}`, removeNothing},
	{"not isolated", `{"process":{"env":["PATH=/bin"]},` + removeByPath + `}`, removeNothing},
	{"path under a file", `{"annotations":{"sforge.io/egress":"v1"},"linux":{"namespaces":[{"type":"network","path":"@NS@/x"}]}}`, removeGo},
	{"invalid allowlist", `{"annotations":{"sforge.io/egress":"v2"},` + removeByPath + `}`, removeGo},
	{"env twice, different", `{"process":{"env":["SFORGE_EGRESS=v1","SFORGE_EGRESS=v1;else:drop"]},` + removeByPath + `}`, removeGo},
	{"annotation null", `{"annotations":{"sforge.io/egress":null},` + removeByPath + `}`, removeGo},
	{"annotation twice", `{"annotations":{"sforge.io/egress":"v1","sforge.io/egress":"v1"},` + removeByPath + `}`, removeGo},
	{"malformed", `{"annotations":{"sforge.io/egress":"v1"},` + removeByPath, removeGo},
}

const removeByPath = `"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"@NS@"}]}`

func TestDecideRemove(t *testing.T) {
	for _, c := range removeCases {
		t.Run(c.name, func(t *testing.T) {
			if d := checkDecideRemoveAgrees(t, []byte(c.spec), engines.Auto); d.kind != c.want {
				t.Fatalf("decision %d, want %d", d.kind, c.want)
			}
		})
	}
	checkEngines(t, func(e string) int { return checkDecideRemoveAgrees(t, []byte(removeCases[0].spec), e).kind }, removeGo, removeTable)
}

// TestDecideRemoveHostNamespace: a namespace path that is one of the
// host's is the Go hook's (it returns without touching it).
func TestDecideRemoveHostNamespace(t *testing.T) {
	spec := strings.ReplaceAll(removeCases[0].spec, "@NS@", "/proc/self/ns/net")
	st := decideState(t, []byte(spec), "c1")
	if d := decideRemove(st, engines.Auto, []string{"/proc/self/ns/net"}); d.kind != removeGo {
		t.Fatalf("decision %d for the hook's own namespace, want the Go hook's", d.kind)
	}
	if d := decideRemove(st, engines.Auto, []string{"/nonexistent"}); d.kind != removeGo {
		t.Fatalf("decision %d with an unreadable host namespace, want the Go hook's (sharesNetNS fails)", d.kind)
	}
}

// checkDecideRemoveAgrees runs the front's poststop decision and the Go
// hook's poststop on the same state and config.json (@NS@ and @GONE@ made
// paths): where the front decides, the Go hook removes the same table from
// the same namespace (or touches and logs nothing).
func checkDecideRemoveAgrees(t *testing.T, spec []byte, engineName string) removal {
	t.Helper()
	const id = "0123456789abcdef"
	dir := t.TempDir()
	ns := filepath.Join(dir, "netns")
	if err := os.WriteFile(ns, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spec = bytes.ReplaceAll(bytes.ReplaceAll(spec, []byte("@NS@"), []byte(ns)), []byte("@GONE@"), []byte(filepath.Join(dir, "gone")))
	st := decideState(t, spec, id)
	d := decideRemove(st, engineName, nil)
	if d.kind == removeGo {
		return d
	}
	rec := &removeRecorder{t: t}
	log := filepath.Join(t.TempDir(), "hook.log")
	h := &hook.Hook{Engine: rec, Log: &hook.Logger{Path: log}, HostNetNS: []string{}}
	if err := h.Run(hook.StagePoststop, bytes.NewReader(st)); err != nil {
		t.Fatalf("poststop of %q: %v", spec, err)
	}
	switch d.kind {
	case removeNothing:
		if rec.target != nil {
			t.Fatalf("the front sees nothing to remove for %q, the Go hook removes %+v", spec, *rec.target)
		}
		if b, err := os.ReadFile(log); !os.IsNotExist(err) {
			t.Fatalf("the front sees nothing to remove for %q, the Go hook logged %q (%v)", spec, b, err)
		}
	case removeTable:
		if rec.target == nil {
			t.Fatalf("the front removes for %q, the Go hook does not", spec)
		}
		want := engine.Target{NetNS: ns, ID: id}
		if *rec.target != want || d.netns != ns || d.id != id {
			t.Fatalf("the front removes from %s for %s, the Go hook %+v", d.netns, d.id, *rec.target)
		}
		requireTableName(t, id, d.table)
	default:
		t.Fatalf("unknown decision %d", d.kind)
	}
	return d
}

func FuzzDecideRemove(f *testing.F) {
	for _, c := range removeCases {
		f.Add([]byte(c.spec))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecideRemoveAgrees(t, b, engines.Auto) })
}
