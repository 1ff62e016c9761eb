package shim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The test binary doubles as sforge-runtime: with this variable set it runs
// Main, so the tests exercise the real exec path without building anything.
const asShimEnv = "SFORGE_SHIM_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asShimEnv) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeRuntime is a runc stand-in that records its argv and stdin and
// writes a known line to stdout.
const fakeRuntime = `#!/bin/sh
: > "$REC/argv"
for a in "$@"; do printf '%s\0' "$a" >> "$REC/argv"; done
cat > "$REC/stdin"
echo "runtime says hi"
`

type harness struct {
	dir, rec, hook, bundle, config string
}

func newHarness(t *testing.T, spec string) *harness {
	t.Helper()
	h := &harness{dir: t.TempDir()}
	h.rec = filepath.Join(h.dir, "rec")
	h.hook = filepath.Join(h.dir, "bin", "sforge-hook")
	h.bundle = filepath.Join(h.dir, "bundle")
	h.config = filepath.Join(h.dir, "runtime.json")
	for _, d := range []string{h.rec, filepath.Dir(h.hook), h.bundle} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runtime := filepath.Join(h.dir, "bin", "fake-runc")
	must(t, os.WriteFile(runtime, []byte(fakeRuntime), 0o755))
	must(t, os.WriteFile(h.hook, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	cfg, _ := json.Marshal(Config{Runtime: runtime, Hook: h.hook, Log: filepath.Join(h.dir, "log", "runtime.log")})
	must(t, os.WriteFile(h.config, cfg, 0o644))
	if spec != "" {
		must(t, os.WriteFile(filepath.Join(h.bundle, SpecFile), []byte(spec), 0o644))
	}
	return h
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type result struct {
	stdout, stderr string
	code           int
	argv           []string // nil when the runtime did not run
	stdin          string
}

func (h *harness) run(t *testing.T, dir, stdin string, args ...string) result {
	t.Helper()
	self, err := os.Executable()
	must(t, err)
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), asShimEnv+"=1", ConfigEnv+"="+h.config, "REC="+h.rec)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(h.rec, "argv")); err == nil {
		r.argv = []string{}
		if len(b) > 0 {
			r.argv = strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		}
		in, _ := os.ReadFile(filepath.Join(h.rec, "stdin"))
		r.stdin = string(in)
		_ = os.Remove(filepath.Join(h.rec, "argv"))
	}
	return r
}

const isolatedSpec = `{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"],"capabilities":{"bounding":["CAP_CHOWN","CAP_NET_RAW"],"effective":["CAP_NET_RAW"]}},` +
	`"annotations":{"sforge.io/egress":"v1;tcp:198.51.100.10:8080"},"linux":{"namespaces":[{"type":"network"}]},"futureField":{"x":1}}`

const plainSpec = `{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"],"capabilities":{"bounding":["CAP_NET_RAW"]}},"linux":{"namespaces":[{"type":"network"}]}}`

func TestPassThroughUntouched(t *testing.T) {
	h := newHarness(t, isolatedSpec)
	specBefore, _ := os.ReadFile(filepath.Join(h.bundle, SpecFile))
	for _, argv := range [][]string{
		{"--root", "/r", "--log", filepath.Join(h.dir, "l.json"), "--log-format", "json", "start", "ctr"},
		{"delete", "--force", "ctr"},
		{"state", "ctr"},
		{"kill", "ctr", "9"},
		{"exec", "--process", "/p.json", "-b", h.bundle, "ctr"},
		{"ps", "--format", "json", "ctr"},
		{"events", "--stats", "ctr"},
		{"features"},
		{"--version"},
		{},
		{"spec", "--bundle", h.bundle},
		{"weird arg with spaces", "--", "-x"},
	} {
		t.Run(strings.Join(argv, "_"), func(t *testing.T) {
			r := h.run(t, h.bundle, "stdin payload\n", argv...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if r.stdout != "runtime says hi\n" {
				t.Fatalf("stdout %q: the shim must add nothing", r.stdout)
			}
			if !slices.Equal(r.argv, argv) {
				t.Fatalf("runtime argv %q, want %q", r.argv, argv)
			}
			if r.stdin != "stdin payload\n" {
				t.Fatalf("runtime stdin %q", r.stdin)
			}
		})
	}
	specAfter, _ := os.ReadFile(filepath.Join(h.bundle, SpecFile))
	if !bytes.Equal(specBefore, specAfter) {
		t.Fatal("a pass-through subcommand modified config.json")
	}
}

func TestCreateIsolated(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv func(bundle string) []string
		cwd  bool
	}{
		{"--bundle", func(b string) []string { return []string{"--log", "/dev/null", "create", "--bundle", b, "ctr"} }, false},
		{"-b=", func(b string) []string { return []string{"create", "-b=" + b, "--pid-file", "/p", "ctr"} }, false},
		{"run -b", func(b string) []string { return []string{"--systemd-cgroup", "run", "-d", "-b", b, "ctr"} }, false},
		{"working directory", func(string) []string { return []string{"create", "ctr"} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, isolatedSpec)
			argv := tc.argv(h.bundle)
			dir := h.dir
			if tc.cwd {
				dir = h.bundle
			}
			for i := 0; i < 2; i++ { // twice: the patch is idempotent
				r := h.run(t, dir, "", argv...)
				if r.code != 0 || r.stderr != "" || r.stdout != "runtime says hi\n" {
					t.Fatalf("run %d: exit %d stdout %q stderr %q", i, r.code, r.stdout, r.stderr)
				}
				if !slices.Equal(r.argv, argv) {
					t.Fatalf("runtime argv %q, want %q", r.argv, argv)
				}
			}
			s, err := LoadSpec(h.bundle)
			must(t, err)
			for _, stage := range []string{StageCreateRuntime, StagePoststop} {
				hs, err := s.Hooks(stage)
				must(t, err)
				if len(hs) != 1 || hs[0].Path != h.hook || !slices.Equal(hs[0].Args, []string{"sforge-hook", stage}) || hs[0].Timeout == nil || *hs[0].Timeout != DefaultHookTimeout {
					t.Fatalf("%s hooks = %+v", stage, hs)
				}
			}
			for _, set := range []string{"bounding", "effective"} {
				caps, _ := s.Capabilities(set)
				if slices.Contains(caps, "CAP_NET_RAW") {
					t.Fatalf("%s still holds CAP_NET_RAW: %v", set, caps)
				}
			}
			b, _ := s.Bytes()
			if !strings.Contains(string(b), `"futureField":{"x":1}`) {
				t.Fatalf("unknown field lost: %s", b)
			}
			log, _ := os.ReadFile(filepath.Join(h.dir, "log", "runtime.log"))
			if !strings.Contains(string(log), "container ctr: isolation hooks added") {
				t.Fatalf("shim log: %q", log)
			}
		})
	}
}

func TestCreateWithoutAllowlistUntouched(t *testing.T) {
	h := newHarness(t, plainSpec)
	p := filepath.Join(h.bundle, SpecFile)
	before, _ := os.Stat(p)
	r := h.run(t, h.dir, "", "create", "-b", h.bundle, "ctr")
	if r.code != 0 || r.argv == nil || r.stdout != "runtime says hi\n" {
		t.Fatalf("exit %d argv %v stdout %q stderr %q", r.code, r.argv, r.stdout, r.stderr)
	}
	after, _ := os.Stat(p)
	if !os.SameFile(before, after) || !before.ModTime().Equal(after.ModTime()) {
		t.Fatal("config.json of a container without allowlist was rewritten")
	}
}

func TestCreateEnvForm(t *testing.T) {
	h := newHarness(t, `{"process":{"env":["SFORGE_EGRESS=v1;tcp:198.51.100.10:8080"]},"linux":{"namespaces":[{"type":"network"}]}}`)
	r := h.run(t, h.dir, "", "create", "-b", h.bundle, "ctr")
	if r.code != 0 {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
	s, _ := LoadSpec(h.bundle)
	if hs, _ := s.Hooks(StageCreateRuntime); len(hs) != 1 {
		t.Fatalf("env form did not add the hook: %+v", hs)
	}
}

// Every refusal: non-zero exit, one line on stderr, the error in runc's
// JSON log, nothing on stdout, and the runtime never runs.
func TestCreateRefused(t *testing.T) {
	withNS := func(extra string) string {
		return `{"process":{"env":["SFORGE_EGRESS=v1;tcp:198.51.100.10:8080"],"capabilities":{"bounding":[` + extra + `]}},"linux":{"namespaces":[{"type":"network"}]}}`
	}
	tests := []struct {
		name, spec, want string
		breakHook        bool
	}{
		{"malformed allowlist", `{"annotations":{"sforge.io/egress":"v1;tcp:nope"},"linux":{"namespaces":[{"type":"network"}]}}`, "invalid sforge.io/egress value", false},
		{"env set twice differently", `{"process":{"env":["SFORGE_EGRESS=v1","SFORGE_EGRESS=v1;dns:10.0.0.1"]},"linux":{"namespaces":[{"type":"network"}]}}`, "more than once", false},
		{"host network", `{"annotations":{"sforge.io/egress":"v1"},"linux":{"namespaces":[{"type":"pid"}]}}`, "host's network namespace", false},
		{"host network by path", `{"annotations":{"sforge.io/egress":"v1"},"linux":{"namespaces":[{"type":"network","path":"/proc/self/ns/net"}]}}`, "host's network namespace", false},
		{"NET_ADMIN", withNS(`"CAP_NET_ADMIN"`), "CAP_NET_ADMIN", false},
		{"privileged", withNS(`"CAP_SYS_ADMIN","CAP_NET_ADMIN","CAP_NET_RAW"`), "refused", false},
		{"hook missing", withNS(`"CAP_CHOWN"`), "missing or not executable", true},
		{"spec not JSON", `{"annotations":`, "failed to parse the container spec", false},
		{"hooks not patchable", `{"annotations":{"sforge.io/egress":"v1"},"hooks":{"poststop":"x"},"linux":{"namespaces":[{"type":"network"}]}}`, "failed to add the", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.spec)
			if tt.breakHook {
				must(t, os.Remove(h.hook))
			}
			logFile := filepath.Join(h.dir, "runc-log.json")
			r := h.run(t, h.dir, "", "--log", logFile, "--log-format", "json", "create", "--bundle", h.bundle, "ctr")
			if r.code == 0 || r.argv != nil {
				t.Fatalf("exit %d, runtime ran with %v: a container asking for isolation started unpatched", r.code, r.argv)
			}
			if r.stdout != "" {
				t.Fatalf("stdout %q", r.stdout)
			}
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "sforge-runtime: ") || !strings.Contains(lines[0], tt.want) {
				t.Fatalf("stderr %q, want one line containing %q", r.stderr, tt.want)
			}
			b, err := os.ReadFile(logFile)
			must(t, err)
			var entry struct{ Level, Msg, Time string }
			if err := json.Unmarshal(bytes.TrimSpace(b), &entry); err != nil || entry.Level != "error" || !strings.Contains(entry.Msg, tt.want) || entry.Time == "" {
				t.Fatalf("runc log %q (%v)", b, err)
			}
		})
	}
}

func TestBadConfig(t *testing.T) {
	h := newHarness(t, plainSpec)
	must(t, os.WriteFile(h.config, []byte(`{"runtime": "/x", "hok": "/y"}`), 0o644))
	r := h.run(t, h.dir, "", "state", "ctr")
	if r.code == 0 || !strings.Contains(r.stderr, `unknown field "hok"`) || r.stdout != "" {
		t.Fatalf("exit %d stderr %q stdout %q", r.code, r.stderr, r.stdout)
	}
	// The runtime pointing at the shim itself would exec in a loop.
	self, _ := os.Executable()
	cfg, _ := json.Marshal(Config{Runtime: self, Log: "-"})
	must(t, os.WriteFile(h.config, cfg, 0o644))
	r = h.run(t, h.dir, "", "state", "ctr")
	if r.code == 0 || !strings.Contains(r.stderr, "is sforge-runtime itself") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
}

func TestLoadConfigDefaults(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	self := filepath.Join(dir, "bin", "sforge-runtime")
	c, err := LoadConfig(filepath.Join(dir, "absent.json"), self, getenv)
	if err != nil {
		if findRunc() == "" {
			t.Skip("no runc on this machine")
		}
		t.Fatal(err)
	}
	if c.Hook != filepath.Join(dir, "bin", "sforge-hook") || c.HookTimeout != DefaultHookTimeout || c.Runtime == "" || c.Log != DefaultLogPath {
		t.Fatalf("defaults: %+v", c)
	}
	env[RuncEnv] = "/opt/runc"
	c, err = LoadConfig(filepath.Join(dir, "absent.json"), self, getenv)
	if err != nil || c.Runtime != "/opt/runc" {
		t.Fatalf("env override: %+v %v", c, err)
	}
}

// A spec that can be read but not written back (a read-only bundle) must
// fail the create: never start the container unpatched.
func TestCreateReadOnlyBundle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a read-only bind mount")
	}
	h := newHarness(t, isolatedSpec)
	must(t, syscall.Mount(h.bundle, h.bundle, "", syscall.MS_BIND, ""))
	defer syscall.Unmount(h.bundle, syscall.MNT_DETACH)
	must(t, syscall.Mount("", h.bundle, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""))
	r := h.run(t, h.dir, "", "create", "-b", h.bundle, "ctr")
	if r.code == 0 || r.argv != nil || !strings.Contains(r.stderr, "failed to write the container spec") {
		t.Fatalf("exit %d argv %v stderr %q", r.code, r.argv, r.stderr)
	}
}

func TestRefusedErrorMessage(t *testing.T) {
	e := &RefusedError{ID: "abc", Cause: "it is bad", Fix: "do better"}
	if got, want := e.Error(), "container abc refused: it is bad; do better"; got != want {
		t.Fatalf("%q != %q", got, want)
	}
	if got := fmt.Sprint(&RefusedError{Cause: "c", Fix: "f"}); !strings.Contains(got, "container ? refused") {
		t.Fatal(got)
	}
}
