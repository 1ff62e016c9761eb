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
	// CAP_NET_RAW dropped from config.json first, as the Go shim does.
	{"NET_RAW", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"bounding":["CAP_NET_RAW"]}},` + planLinux + `}`, true},
	{"net_raw spelled loosely", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"ambient":[" net_raw ", "CAP_KILL"]}},` + planLinux + `}`, true},
	{"NET_RAW everywhere", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"permitted" : [ null, "CAP_NET_RAW" ,"CAP_CHOWN", "cap_net_raw"],"bounding":["CAP_NET_RAW","CAP_NET_RAW"],"effective":["X"]}},` + planLinux + `}`, true},
	// The Go shim's: it refuses, or decides otherwise.
	{"NET_ADMIN", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"effective":["CAP_NET_ADMIN"]}},` + planLinux + `}`, false},
	{"SYS_ADMIN", `{"annotations":{"sforge.io/egress":"v1"},"process":{"capabilities":{"permitted":["sys_admin"]}},` + planLinux + `}`, false},
	{"no capabilities", `{"annotations":{"sforge.io/egress":"v1"},"process":{},` + planLinux + `}`, false},
	{"no process", `{"annotations":{"sforge.io/egress":"v1"},` + planLinux + `}`, false},
	{"namespace by path", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,"linux":{"namespaces":[{"type":"network","path":"/run/netns/x"}]}}`, false},
	{"host network", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,"linux":{"namespaces":[{"type":"pid"}]}}`, false},
	{"user namespace", `{"annotations":{"sforge.io/egress":"v1"},` + planProcess + `,"linux":{"namespaces":[{"type":"user"},{"type":"network"}]}}`, false},
	{"made namespace recorded", `{"annotations":{"sforge.io/egress":"v1","sforge.io/preisolated-netns":"/proc/1/fd/3"},` + planProcess + `,` + planLinux + `}`, false},
	{"not isolated", `{"annotations":{"sforge.io/other":"x"},` + planProcess + `,` + planLinux + `}`, false},
	{"invalid allowlist", `{"annotations":{"sforge.io/egress":"v2"},` + planProcess + `,` + planLinux + `}`, false},
	{"env twice, different", `{"process":{"env":["SFORGE_EGRESS=v1","SFORGE_EGRESS=v1;else:drop"],` + planCaps + `},` + planLinux + `}`, false},
	{"escaped", `{"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:\u0034"},` + planProcess + `,` + planLinux + `}`, false},
	{"escaped annotation name", `{"annotations":{"sforge.io/egress":"v1","sforge.io\/preisolated-netns":"/proc/1/fd/3"},` + planProcess + `,` + planLinux + `}`, false},
	{"escaped member name", `{"annotations":{"sforge.io/egress":"v1"},"pro\u0063ess":{},` + planProcess + `,` + planLinux + `}`, false},
	{"escaped environment", `{"annotations":{"sforge.io/egress":"v1"},"process":{"env":["A=\u003c"],` + planCaps + `},` + planLinux + `}`, false},
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
)

func TestPlanCreate(t *testing.T) {
	for _, c := range planCases {
		t.Run(c.name, func(t *testing.T) {
			if got := checkPlanAgrees(t, []byte(c.spec), planArgs, engines.Auto, ""); got != c.want {
				t.Fatalf("the front creates: %v, want %v", got, c.want)
			}
		})
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
			if got := checkPlanAgrees(t, spec, c.args, c.engine, c.listenF); got != c.want {
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
	if !checkPlanAgrees(t, b, planArgs, engines.Auto, "") {
		t.Error("Docker's spec with CAP_NET_RAW: the front leaves it to Go, want it to create")
	}
	b = regexp.MustCompile(`"CAP_NET_RAW",\s*`).ReplaceAll(b, nil)
	if !checkPlanAgrees(t, b, planArgs, engines.Auto, "") {
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
// the same command line and config.json: the Go shim must accept the
// container, run runc create once with the command line unchanged, leave
// config.json as it was and install the allowlist the front found, from
// the same place, in a container of the same id. It reports whether the
// front creates.
func checkPlanAgrees(t *testing.T, spec []byte, after []string, engineName, listenFDs string) bool {
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
	p, ok := planCreate(args, spec, engineName, listenFDs)
	if !ok {
		return false
	}
	rt, rec := &fakeRuntime{t: t}, &recordingEngine{}
	s := &shim.Shim{Runtime: rt, Engine: rec, EngineName: engineName, NoMadeNetNS: true, HostNetNS: []string{},
		Hook: "/nonexistent/sforge-hook", Getwd: func() (string, error) { return bundle, nil },
		Getenv: func(k string) string {
			if k == "LISTEN_FDS" {
				return listenFDs
			}
			return ""
		}}
	goArgs := append([]string{"create"}, args...)
	if err := s.Run(goArgs); err != nil {
		t.Fatalf("the front creates %q, the Go shim refuses: %v", spec, err)
	}
	if len(rt.runs) != 1 || !slices.Equal(rt.runs[0], goArgs) {
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
		if bytes.Contains(p.edited, []byte(`"CAP_NET_RAW"`)) {
			t.Fatalf("the front would keep CAP_NET_RAW: %q", p.edited)
		}
	}
	if len(rec.installs) != 1 {
		t.Fatalf("the front installs for %q, the Go shim installed %d times", spec, len(rec.installs))
	}
	want, err := policy.Decode(string(p.value))
	if err != nil || !want.Equal(rec.installs[0]) || len(want.Endpoints) != p.endpoints || len(want.DNS) != p.dns {
		t.Fatalf("%q: the front installs %q (%d endpoints, %d resolvers), the Go shim %+v (%v)", spec, p.value, p.endpoints, p.dns, rec.installs[0], err)
	}
	if table, err := policy.ChainName(rec.targets[0].ID); err != nil || p.table != table || p.id != rec.targets[0].ID {
		t.Fatalf("the front installs table %q for %q, the Go shim for %q (%v)", p.table, p.id, rec.targets[0].ID, err)
	}
	return true
}

func FuzzPlanCreate(f *testing.F) {
	for _, c := range planCases {
		f.Add([]byte(c.spec))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkPlanAgrees(t, b, planArgs, engines.Auto, "") })
}
