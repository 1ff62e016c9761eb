//go:build cgo

package front

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/policy"
	"github.com/sforge-dev/netiso/shim"
)

// planCases are config.json files of a create; want is whether the front
// creates the container itself (engine auto, a --pid-file, one id).
var planCases = []struct {
	name, spec string
	want       bool
}{
	{"annotation", `{"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:443;dns:10.0.0.2"},` + planProcess + `,` + planLinux + `}`, true},
	{"env", `{"process":{"env":["PATH=/bin","SFORGE_EGRESS=v1;udp:10.0.0.0/8:53;else:drop"],` + planCaps + `},` + planLinux + `}`, true},
	{"annotation and env", `{"annotations":{"sforge.io/egress":"v1"},"process":{"env":["SFORGE_EGRESS=v1;tcp:1.2.3.4:1"],` + planCaps + `},` + planLinux + `}`, true},
	{"empty allowlist", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,` + planLinux + `}`, true},
	{"other members", `{"ociVersion":"1.0.2","hooks":{"prestart":[{"path":"/x"}]},"root":{"path":"rootfs"},"annotations":{"a":"b","sforge.io/egress":"v1"},` + planProcess + `,` + planLinux + `}`, true},
	{"empty capabilities", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{}},` + planLinux + `}`, true},
	{"capability not forbidden", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"effective":["CAP_CAP_NET_RAW","NET_RAWX",null]}},` + planLinux + `}`, true},
	// Escapes where nothing reads the value (encoding/json writes "&" as
	// \u0026: `sh -c 'a && b'`).
	{"escaped argument", `{"annotations":{"sforge.io/egress":"v1"},"process":{"args":["sh","-c","a \u0026\u0026 b \"\\/\n\ud800"],` + planCaps + `},` + planLinux + `}`, true},
	{"escaped name, skipped", `{"hooks":{"pre\u0073tart":[{"path":"/x"}]},"annotations":{"sforge.io/egress":"v1","note":"\u003c"},` + planProcess + `,` + planLinux + `}`, true},
	// Environment entries that are not the allowlist, escapes and all:
	// sforge run's prompt with its newlines, a URL's "&".
	{"escaped environment", `{"annotations":{"sforge.io/egress":"v1"},"process":{"env":["A=\u003c"],` + planCaps + `},` + planLinux + `}`, true},
	{"escaped environment, env allowlist", `{"process":{"env":["PATH=/bin","SFORGE_AGENT_QUERY=Say hello.\n\nNetwork access is restricted.","U=http://x/?a=1\u0026b=2","SFORGE_EGRESS=v1;tcp:198.51.100.10:8080","SFORGE_EGRES=\n","SFORGE_EGRESSX\u003d"],` + planCaps + `},` + planLinux + `}`, true},
	{"environment not ASCII", `{"process":{"env":["SFORGE_AGENT_QUERY=向评测服务器问好，然后检查其他地址都不可达。\n\u2028","SFORGE_EGRESS=v1;tcp:198.51.100.10:8080"],` + planCaps + `},` + planLinux + `}`, true},
	{"escaped environment name", `{"process":{"env":["X\u0041=1","X\t=2","SFORGE_EGRESS=v1","SX\u0041=3"],` + planCaps + `},` + planLinux + `}`, true},
	// CAP_NET_RAW dropped from config.json first, as the Go shim does.
	{"NET_RAW", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"bounding":["CAP_NET_RAW"]}},` + planLinux + `}`, true},
	{"net_raw spelled loosely", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"ambient":[" net_raw ", "CAP_KILL"]}},` + planLinux + `}`, true},
	{"NET_RAW everywhere", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"permitted" : [ null, "CAP_NET_RAW" ,"CAP_CHOWN", "cap_net_raw"],"bounding":["CAP_NET_RAW","CAP_NET_RAW"],"effective":["X"]}},` + planLinux + `}`, true},
	// The Go shim's: it refuses, or decides otherwise.
	{"NET_ADMIN", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"effective":["CAP_NET_ADMIN"]}},` + planLinux + `}`, false},
	{"SYS_ADMIN", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"permitted":["sys_admin"]}},` + planLinux + `}`, false},
	{"no capabilities", `{"annotations":{"sforge.io/egress":"v1"},"process":{},` + planLinux + `}`, false},
	{"no process", `{"annotations":{"sforge.io/egress":"v1"},` + planLinux + `}`, false},
	// A namespace by path (--network container:X, ctr --with-ns): the
	// poststop hook added where Spec.AddHook puts it.
	{"namespace by path", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,` + planByPath + `}`, true},
	{"by path, NET_RAW", ` {"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:443"},"process":{"capabilities":{"bounding":["CAP_NET_RAW","CAP_KILL"]}},` + planByPath + `} `, true},
	{"by path, hooks null", `{"hooks":null,"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,` + planByPath + `}`, true},
	{"by path, hooks empty", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,` + planByPath + `,"hooks": { } }`, true},
	{"by path, other stages", `{"annotations":{"sforge.io/egress":"v1"},"hooks":{"prestart":[{"path":"/x"}],"createRuntime":null},` + planProcess + `,` + planByPath + `}`, true},
	{"by path, poststop null", `{"annotations":{"sforge.io/egress":"v1"},"hooks":{"prestart":[],"poststop" : null},` + planProcess + `,` + planByPath + `}`, true},
	{"by path, escaped stage", `{"annotations":{"sforge.io/egress":"v1"},"hooks":{"pre\u0073tart":[]},` + planProcess + `,` + planByPath + `}`, false},
	{"by path, poststop listed", `{"annotations":{"sforge.io/egress":"v1"},"hooks":{"poststop":[{"path":"/x"}]},` + planProcess + `,` + planByPath + `}`, false},
	{"by path, poststop empty", `{"annotations":{"sforge.io/egress":"v1"},"hooks":{"poststop":[]},` + planProcess + `,` + planByPath + `}`, false},
	{"by path, poststop folded", `{"annotations":{"sforge.io/egress":"v1"},"hooks":{"postStop":null},` + planProcess + `,` + planByPath + `}`, false},
	{"by path, poststop twice", `{"annotations":{"sforge.io/egress":"v1"},"hooks":{"poststop":null,"poststop":null},` + planProcess + `,` + planByPath + `}`, false},
	{"by path, hooks a list", `{"annotations":{"sforge.io/egress":"v1"},"hooks":[],` + planProcess + `,` + planByPath + `}`, false},
	{"by path, hooks folded", `{"annotations":{"sforge.io/egress":"v1"},"Hooks":{},` + planProcess + `,` + planByPath + `}`, false},
	{"by path, hooks twice", `{"annotations":{"sforge.io/egress":"v1"},"hooks":{},"hooks":{},` + planProcess + `,` + planByPath + `}`, false},
	// The host's by another name (init's is not readable everywhere).
	{"by path, the runtime's", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,"linux":{"namespaces":[{"type":"network","path":"/proc/self/ns/net"}]}}`, false},
	{"host network", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,"linux":{"namespaces":[{"type":"pid"}]}}`, false},
	// A user namespace (Docker's --userns-remap): the Go shim creates
	// first too.
	{"user namespace", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,"linux":{"namespaces":[{"type":"user"},{"type":"network"}],"uidMappings":[{"containerID":0,"hostID":100000,"size":65536}]}}`, true},
	{"user namespace by path", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,"linux":{"namespaces":[{"type":"network","path":"/run/netns/x"},{"type":"user","path":"/proc/9/ns/user"}]}}`, true},
	{"made namespace recorded", `{"annotations":{"sforge.io/egress":"v1","sforge.io/preisolated-netns":"/proc/1/fd/3"},` + planProcess + `,` + planLinux + `}`, false},
	{"not isolated", `{"annotations":{"sforge.io/other":"x"},` + planProcess + `,` + planLinux + `}`, false},
	{"invalid allowlist", `{"annotations":{"sforge.io/egress":"v2"},` + planProcess + `,` + planLinux + `}`, false},
	{"env twice, different", `{"process":{"env":["SFORGE_EGRESS=v1","SFORGE_EGRESS=v1;else:drop"],` + planCaps + `},` + planLinux + `}`, false},
	{"escaped", `{"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:\u0034"},` + planProcess + `,` + planLinux + `}`, false},
	{"escaped annotation name", `{"annotations":{"sforge.io/egress":"v1","sforge.io\/preisolated-netns":"/proc/1/fd/3"},` + planProcess + `,` + planLinux + `}`, false},
	{"escaped member name", `{"annotations":{"sforge.io/egress":"v1"},"pro\u0063ess":{},` + planProcess + `,` + planLinux + `}`, false},
	// An environment entry with an escape may be the allowlist only if
	// what comes before its first escape is, or begins, SFORGE_EGRESS=.
	{"escaped allowlist", `{"process":{"env":["SFORGE_EGRESS=v1;tcp:1.2.3.4:\u0034"],` + planCaps + `},` + planLinux + `}`, false},
	{"escaped allowlist name", `{"process":{"env":["SFORGE\u005fEGRESS=v1;else:drop"],` + planCaps + `},` + planLinux + `}`, false},
	{"escaped allowlist name, beside the annotation", `{"annotations":{"sforge.io/egress":"v1"},"process":{"env":["\u0053FORGE_EGRESS=v1;else:drop"],` + planCaps + `},` + planLinux + `}`, false},
	{"escaped first byte", `{"process":{"env":["\u0041=1","SFORGE_EGRESS=v1"],` + planCaps + `},` + planLinux + `}`, false},
	{"escaped equals sign", `{"process":{"env":["SFORGE_EGRESS\u003dv1","SFORGE_EGRESS=v1;else:drop"],` + planCaps + `},` + planLinux + `}`, false},
	{"escaped capability", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"bounding":["CAP_NET_\u0052AW"]}},` + planLinux + `}`, false},
	{"invalid escape", `{"annotations":{"sforge.io/egress":"v1"},"process":{"args":["\x"],` + planCaps + `},` + planLinux + `}`, false},
	{"short escape", `{"annotations":{"sforge.io/egress":"v1"},"process":{"args":["\u12"],` + planCaps + `},` + planLinux + `}`, false},
	{"folded name", `{"annotations":{"sforge.io/egress":"v1"},"Process":{},` + planProcess + `,` + planLinux + `}`, false},
	{"malformed", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,` + planLinux, false},
}

const (
	planCaps    = `"capabilities":{"bounding":["CAP_CHOWN","CAP_KILL"],"effective":["CAP_CHOWN"]}`
	planProcess = `"process":{"env":["PATH=/bin"],` + planCaps + `}`
	planLinux   = `"linux":{"namespaces":[{"type":"pid"},{"type":"network"}]}`
	planByPath  = `"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/x"}]}`
)

func TestPlanCreate(t *testing.T) {
	for _, c := range planCases {
		t.Run(c.name, func(t *testing.T) {
			if got := checkPlanAgrees(t, []byte(c.spec), planArgs, defaultPlanEnv(t)); got != c.want {
				t.Fatalf("the front creates: %v, want %v", got, c.want)
			}
		})
	}
}

// TestPlanCreateSaysWhy: every create the front leaves to Go has a reason
// (front.Left), which the Go shim logs with it; one it does has none.
func TestPlanCreateSaysWhy(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--bundle", dir, "--pid-file", filepath.Join(dir, "init.pid"), "c1"}
	want := map[string]string{
		"escaped allowlist":        "not sure",
		"NET_ADMIN":                "CAP_NET_ADMIN or CAP_SYS_ADMIN listed",
		"no capabilities":          "no capabilities listed",
		"host network":             "no network namespace",
		"invalid allowlist":        "does not decode",
		"malformed":                "cannot read",
		"made namespace recorded":  "another sforge annotation",
		"by path, poststop listed": "hooks the front does not add to",
	}
	for _, c := range planCases {
		t.Run(c.name, func(t *testing.T) {
			p, ok := planCreate(args, []byte(c.spec), defaultPlanEnv(t))
			switch {
			case ok && p.left != "":
				t.Fatalf("the front creates, and says it left the create to Go: %q", p.left)
			case !ok && p.left == "":
				t.Fatal("the front leaves the create to Go without a reason")
			case !ok && !strings.Contains(p.left, want[c.name]):
				t.Fatalf("reason %q, want one with %q", p.left, want[c.name])
			}
		})
	}
	if _, ok := planCreate([]string{"--bundle", dir, "c1"}, []byte(planCases[0].spec), defaultPlanEnv(t)); ok {
		t.Fatal("a create without --pid-file planned")
	} else if l := Left(); !strings.Contains(l, "no --pid-file") {
		t.Fatalf("reason %q for a create without --pid-file", l)
	}
}

// planArgs are containerd's arguments after "create" (the bundle and pid
// file are filled in).
var planArgs = []string{"--bundle", "", "--pid-file", "", "c1"}

// TestPlanCreateArgs: the command lines and settings the front leaves to
// the Go shim.
func TestPlanCreateArgs(t *testing.T) {
	spec := []byte(planCases[0].spec)
	cases := []struct {
		name            string
		args            []string
		engine, listenF string
		want            bool
	}{
		{"containerd", planArgs, engines.Auto, "", true},
		{"console socket, flags inline", []string{"--bundle=", "--console-socket", "/run/s.sock", "--pid-file=", "--no-pivot", "c1"}, "", "", true},
		{"engine nftables", planArgs, engines.NFTables, "", true},
		{"engine iptables", planArgs, engines.IPTables, "", false},
		{"engine iptables-nft", planArgs, engines.IPTablesNFT, "", false},
		{"socket activation", planArgs, engines.Auto, "2", false},
		{"no pid file", []string{"--bundle", "", "c1"}, engines.Auto, "", false},
		{"two ids", []string{"--bundle", "", "--pid-file", "", "c1", "c2"}, engines.Auto, "", false},
		{"no id", []string{"--bundle", "", "--pid-file", ""}, engines.Auto, "", false},
		{"odd id", []string{"--bundle", "", "--pid-file", "", "c/1"}, engines.Auto, "", false},
		{"separator", []string{"--bundle", "", "--pid-file", "", "--", "c1"}, engines.Auto, "", false},
		{"unknown flag", []string{"--bundle", "", "--pid-file", "", "--weird", "c1"}, engines.Auto, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := defaultPlanEnv(t)
			e.engine, e.listenFDs = c.engine, c.listenF
			if got := checkPlanAgrees(t, spec, c.args, e); got != c.want {
				t.Fatalf("the front creates: %v, want %v", got, c.want)
			}
		})
	}
}

// TestPlanCreateEngineSpecs: the config.json Docker wrote on this kind of
// machine, with an allowlist, is one the front creates itself: as `docker
// run --runtime sforge -e SFORGE_EGRESS=...` has it (CAP_NET_RAW granted,
// which the front drops), and as `sforge run` has it (--cap-drop NET_RAW).
// (podman's names its namespace by path, and goes through the hook:
// hook/front.)
func TestPlanCreateEngineSpecs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "bench", "testdata", "docker-20.10-config.json"))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`"env": [`), []byte(`"env": ["SFORGE_EGRESS=v1;tcp:10.1.2.3:443",`), 1)
	if !checkPlanAgrees(t, b, planArgs, defaultPlanEnv(t)) {
		t.Error("Docker's spec with CAP_NET_RAW: the front leaves it to Go, want it to create")
	}
	b = regexp.MustCompile(`"CAP_NET_RAW",\s*`).ReplaceAll(b, nil)
	if !checkPlanAgrees(t, b, planArgs, defaultPlanEnv(t)) {
		t.Error("Docker's spec without CAP_NET_RAW: the front leaves it to Go, want it to create")
	}
}

// fakeRuntime stands in for runc: a create writes this process's pid to
// the pid file, as runc writes its container's.
type fakeRuntime struct {
	t    *testing.T
	runs [][]string
}

func (r *fakeRuntime) Exec(args []string) error {
	return fmt.Errorf("the shim exec'd the runtime with %q", args)
}

func (r *fakeRuntime) Run(args []string) (int, error) {
	r.runs = append(r.runs, slices.Clone(args))
	for i, a := range args {
		path, inline := strings.CutPrefix(a, "--pid-file=")
		if !inline && (a != "--pid-file" || i+1 == len(args)) {
			continue
		}
		if !inline {
			path = args[i+1]
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	return 0, nil
}

type recordingEngine struct {
	installs []policy.Allowlist
	targets  []engine.Target
}

func (r *recordingEngine) Name() string { return "recording" }
func (r *recordingEngine) Install(t engine.Target, a policy.Allowlist) (engine.Report, error) {
	r.installs, r.targets = append(r.installs, a), append(r.targets, t)
	return engine.Report{Engine: "recording", Rules: 1}, nil
}
func (r *recordingEngine) Remove(engine.Target) error                  { return nil }
func (r *recordingEngine) Check(engine.Target, policy.Allowlist) error { return nil }

// checkPlanAgrees runs the front's create decision and, where the front
// would create the container itself, the Go shim's create-then-install on
// the same command line, config.json and settings (e): the Go shim must
// accept the container, run runc create once with the command line
// unchanged, write the config.json the front would write (or leave it as
// it was when the front would) and install the allowlist the front found,
// from the same place, in a container of the same id. For a namespace by
// path the stand-in runc's process is not in the named namespace, so the
// Go shim stops there (and deletes the container): the allowlist is then
// compared with the one its decision reads. It reports whether the front
// creates.
func checkPlanAgrees(t *testing.T, spec []byte, after []string, e planEnv) bool {
	t.Helper()
	bundle := t.TempDir()
	config := filepath.Join(bundle, "config.json")
	if err := os.WriteFile(config, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(after)
	for i := range args {
		switch {
		case i > 0 && args[i-1] == "--bundle", args[i] == "--bundle=":
			args[i] += bundle
		case i > 0 && args[i-1] == "--pid-file", args[i] == "--pid-file=":
			args[i] += filepath.Join(bundle, "init.pid")
		}
	}
	p, ok := planCreate(args, spec, e)
	if !ok {
		return false
	}
	hook, ok := hookPath(e.hook)
	if !ok {
		t.Fatalf("the front plans with hook %q, and cannot say which", e.hook)
	}
	rt, rec := &fakeRuntime{t: t}, &recordingEngine{}
	s := &shim.Shim{Runtime: rt, Engine: rec, EngineName: e.engine, NoMadeNetNS: true, HostNetNS: []string{},
		Hook: hook, HookTimeout: e.hookTimeout, Getwd: func() (string, error) { return bundle, nil },
		Getenv: func(k string) string {
			switch k {
			case "LISTEN_FDS":
				return e.listenFDs
			case shim.HookLogEnv:
				return e.hookLog
			}
			return ""
		}}
	goArgs := append([]string{"create"}, args...)
	err := s.Run(goArgs)
	// The fake runtime's process is this one, in no namespace a spec
	// names (the front would refuse this one's, as the host's): the Go
	// shim checks that after create and refuses, which is the front's
	// hand-over too. Up to there the two must agree.
	wrongNS := fmt.Sprintf("its process is not in the network namespace its spec names (%s)", p.netns)
	switch {
	case p.netns == "" && err != nil, p.netns != "" && (err == nil || !strings.Contains(err.Error(), wrongNS)):
		t.Fatalf("the front creates %q, the Go shim: %v", spec, err)
	}
	runs := 1
	if p.netns != "" {
		runs = 2 // and runc delete --force, after the refusal
	}
	if len(rt.runs) != runs || !slices.Equal(rt.runs[0], goArgs) {
		t.Fatalf("the front runs runc create with %q, the Go shim ran %q", goArgs, rt.runs)
	}
	written, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	if p.edited == nil && !bytes.Equal(written, spec) {
		t.Fatalf("the front leaves config.json as it is, the Go shim wrote %q", written)
	}
	if p.edited != nil {
		// Not the same bytes (Go writes the document anew, members
		// sorted), the same document.
		var c, g any
		if err := json.Unmarshal(p.edited, &c); err != nil {
			t.Fatalf("the front would write %q, not JSON: %v", p.edited, err)
		}
		if err := json.Unmarshal(written, &g); err != nil || !reflect.DeepEqual(c, g) {
			t.Fatalf("%q: the front would write %q, the Go shim wrote %q (%v)", spec, p.edited, written, err)
		}
		if keepsNetRaw(t, p.edited) {
			t.Fatalf("the front would keep CAP_NET_RAW: %q", p.edited)
		}
	}
	want, err := policy.Decode(string(p.value))
	if err != nil || len(want.Endpoints) != p.endpoints || len(want.DNS) != p.dns {
		t.Fatalf("%q: the front installs %q (%d endpoints, %d resolvers): %v", spec, p.value, p.endpoints, p.dns, err)
	}
	if p.netns != "" {
		// What the Go shim would have installed: the allowlist its
		// decision reads from the spec.
		gs, err := shim.ParseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := policy.Lookup(gs.Annotations(), gs.Env())
		if got, err2 := policy.Decode(v); err != nil || err2 != nil || !want.Equal(got) {
			t.Fatalf("%q: the front installs %q, the Go shim %q (%v, %v)", spec, p.value, v, err, err2)
		}
		if table, err := policy.ChainName(p.id); err != nil || p.table != table || !slices.Contains(goArgs, p.id) {
			t.Fatalf("the front installs table %q for %q (%v)", p.table, p.id, err)
		}
		return true
	}
	if len(rec.installs) != 1 {
		t.Fatalf("the front installs for %q, the Go shim installed %d times", spec, len(rec.installs))
	}
	if !want.Equal(rec.installs[0]) {
		t.Fatalf("%q: the front installs %q, the Go shim %+v", spec, p.value, rec.installs[0])
	}
	if table, err := policy.ChainName(rec.targets[0].ID); err != nil || p.table != table || p.id != rec.targets[0].ID {
		t.Fatalf("the front installs table %q for %q, the Go shim for %q (%v)", p.table, p.id, rec.targets[0].ID, err)
	}
	return true
}

// keepsNetRaw reports whether a capability set of the process in doc
// still holds CAP_NET_RAW, in any spelling the shim reads as it (a member
// of capabilities that is not a set is not the shim's to change).
func keepsNetRaw(t *testing.T, doc []byte) bool {
	var d struct {
		Process struct {
			Capabilities map[string]json.RawMessage `json:"capabilities"`
		} `json:"process"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatalf("%q: %v", doc, err)
	}
	for _, set := range []string{"bounding", "effective", "inheritable", "permitted", "ambient"} {
		var caps []string
		if err := json.Unmarshal(d.Process.Capabilities[set], &caps); err != nil && d.Process.Capabilities[set] != nil {
			t.Fatalf("%q: capabilities.%s: %v", doc, set, err)
		}
		for _, c := range caps {
			if strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(c)), "CAP_") == "NET_RAW" {
				return true
			}
		}
	}
	return false
}

// defaultPlanEnv: engine auto, a hook that exists, no hook log.
func defaultPlanEnv(t *testing.T) planEnv {
	return planEnv{engine: engines.Auto, hook: executable(t)}
}

// executable makes an executable file to stand for sforge-hook, which
// the shim must find before it names it in a spec.
func executable(tb testing.TB) string {
	p := filepath.Join(tb.TempDir(), "sforge-hook")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		tb.Fatal(err)
	}
	return p
}

func FuzzPlanCreate(f *testing.F) {
	for _, c := range planCases {
		f.Add([]byte(c.spec))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkPlanAgrees(t, b, planArgs, defaultPlanEnv(t)) })
}

// TestPlanCreateByPathSettings: the hook entry the front writes for a
// namespace by path follows the settings as the Go shim's does (a forced
// engine, the hook's log, the timeout); a hook the shim would refuse, or
// a setting the front does not write, leaves the create to Go.
func TestPlanCreateByPathSettings(t *testing.T) {
	spec := []byte(`{"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:443"},` + planProcess + `,` + planByPath + `}`)
	hook := executable(t)
	notExec := filepath.Join(t.TempDir(), "sforge-hook")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		e    planEnv
		want bool
	}{
		{"engine forced", planEnv{engine: engines.NFTables, hook: hook}, true},
		{"engine unset", planEnv{hook: hook}, true},
		{"timeout", planEnv{engine: engines.Auto, hook: hook, hookTimeout: 15}, true},
		{"timeout negative", planEnv{engine: engines.Auto, hook: hook, hookTimeout: -3}, true},
		{"hook log", planEnv{engine: engines.Auto, hook: hook, hookLog: "/var/log/a \"b\"\\\n\t\x7f"}, true},
		{"hook log not ASCII", planEnv{engine: engines.Auto, hook: hook, hookLog: "/var/log/é"}, false},
		{"hook not executable", planEnv{engine: engines.Auto, hook: notExec}, false},
		{"hook missing", planEnv{engine: engines.Auto, hook: "/nonexistent/sforge-hook"}, false},
		{"hook a directory", planEnv{engine: engines.Auto, hook: t.TempDir()}, false},
		{"hook next to the shim (none here)", planEnv{engine: engines.Auto}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := checkPlanAgrees(t, spec, planArgs, c.e); got != c.want {
				t.Fatalf("the front creates: %v, want %v", got, c.want)
			}
		})
	}
}

// TestHookPathMatchesLoadConfig: the hook the front names in a spec is the
// shim's: the settings file's, else the one next to the executable.
func TestHookPathMatchesLoadConfig(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"", "/opt/sforge/bin/sforge-hook", "relative/sforge-hook"} {
		got, ok := hookPath(file)
		if !ok {
			t.Fatalf("hook %q: the front cannot say which", file)
		}
		b, _ := json.Marshal(shim.Config{Hook: file})
		path := filepath.Join(t.TempDir(), "runtime.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := shim.LoadConfig(path, self, func(k string) string {
			if k == shim.RuncEnv {
				return "/bin/true"
			}
			return ""
		})
		if err != nil || c.Hook != got {
			t.Fatalf("hook %q: the front names %q, the shim %q (%v)", file, got, c.Hook, err)
		}
	}
}
