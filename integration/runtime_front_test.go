package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/internal/testbin"
	"github.com/sforge-dev/netiso/shim/front"
)

// TestRuntimeFront runs sforge-runtime's command lines with its C
// pass-through front (shim/front) and without it ($SFORGE_RUNTIME_NO_FRONT):
// the runtime must get the same argv and environment and the caller the
// same exit status and output either way, and the front must have taken the
// pass-through ones (and the creates of a spec without an allowlist) itself (the Go runtime never started: no
// GODEBUG=inittrace line). The lifecycles through real runc, Docker and
// containerd elsewhere in this package run with the front as built.
func TestRuntimeFront(t *testing.T) {
	if !front.Built {
		t.Fatal("the test binary was built without cgo: sforge-runtime's front is not tested")
	}
	bin := testbin.Build(t, "./cmd/sforge-runtime")
	dir := t.TempDir()
	fake := filepath.Join(dir, "bin", "runc")
	if err := os.MkdirAll(filepath.Dir(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	// The stand-in runtime records its argv and environment, writes to
	// stdout and exits 7: the shim's caller must see all of it.
	script := "#!/bin/sh\n{ printf '%s\\n' \"$0\" \"$@\"; env | grep -v '^SFORGE_RUNTIME_NO_FRONT=' | sort; } > \"$FRONT_OUT\"\necho runtime-stdout\nexit 7\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// Bundles: one whose config.json says nothing of sforge's (the front
	// execs runc for it), the working directory's (the same), and one with
	// a malformed allowlist (the shim refuses it, with or without the front).
	for path, spec := range map[string]string{
		filepath.Join(dir, "plain", "config.json"):    `{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]}}`,
		filepath.Join(dir, "config.json"):             `{"ociVersion":"1.0.2"}`,
		filepath.Join(dir, "isolated", "config.json"): `{"ociVersion":"1.0.2","annotations":{"sforge.io/egress":"not-an-allowlist"}}`,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(dir, "runtime.log")
	config := func(s string) string {
		p := filepath.Join(t.TempDir(), "runtime.json")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const path = "/usr/sbin:/usr/bin:/sbin:/bin"
	settings := []struct {
		name string
		env  []string
		fast bool // the front can decide
		// passOnly: run only the pass-through command lines (the shim
		// would log anything else to the default /var/log path).
		passOnly bool
	}{
		{"runtime in runtime.json", []string{"SFORGE_RUNTIME_CONFIG=" + config(`{"runtime":"`+fake+`","log":"`+log+`","engine":"auto"}`), "PATH=" + path}, true, false},
		{"runtime on PATH", []string{"SFORGE_RUNTIME_CONFIG=" + config(`{"log":"`+log+`"}`), "PATH=" + filepath.Dir(fake) + ":" + path}, true, false},
		{"SFORGE_RUNC", []string{"SFORGE_RUNTIME_CONFIG=" + config(`{"log":"`+log+`"}`), "SFORGE_RUNC=" + fake, "SFORGE_ENGINE=nftables", "PATH=" + path}, true, false},
		{"no runtime.json", []string{"SFORGE_RUNTIME_CONFIG=" + filepath.Join(dir, "absent.json"), "SFORGE_RUNC=" + fake, "PATH=" + path}, true, true},
		{"unknown member", []string{"SFORGE_RUNTIME_CONFIG=" + config(`{"runtime":"`+fake+`","log":"`+log+`","extra":1}`), "PATH=" + path}, false, false},
		{"unknown engine", []string{"SFORGE_RUNTIME_CONFIG=" + config(`{"runtime":"`+fake+`","log":"`+log+`","engine":"pf"}`), "PATH=" + path}, false, false},
		{"runtime is sforge-runtime", []string{"SFORGE_RUNTIME_CONFIG=" + config(`{"runtime":"`+bin+`","log":"`+log+`"}`), "PATH=" + path}, false, false},
		{"escaped runtime", []string{"SFORGE_RUNTIME_CONFIG=" + config(`{"runtime":"`+strings.ReplaceAll(fake, "/", `\/`)+`","log":"`+log+`"}`), "PATH=" + path}, false, false},
	}
	lines := []struct {
		args []string
		pass bool // a pass-through command line the front knows
	}{
		{[]string{"start", "c1"}, true},
		{[]string{"--root", "/run/x", "--log", filepath.Join(dir, "runc-log.json"), "--log-format", "json", "delete", "--force", "c1"}, true},
		{[]string{"--root=/run/x", "--systemd-cgroup", "kill", "c1", "KILL"}, true},
		{[]string{"state", "c1"}, true},
		{[]string{"--version"}, false},
		{[]string{"--debug=true", "state", "c1"}, false},
		{[]string{"--root", "/run/x", "create", "--bundle", filepath.Join(dir, "plain"), "--pid-file", filepath.Join(dir, "pid"), "c1"}, true},
		{[]string{"run", "--no-pivot", "c1"}, true}, // the working directory's
		{[]string{"create", "--bundle", filepath.Join(dir, "isolated"), "c1"}, false},
		{[]string{"create", "--bundle", filepath.Join(dir, "no-bundle"), "c1"}, false},
		{[]string{"--root"}, false},
	}
	run := func(t *testing.T, env, args []string, noFront bool) (code int, stdout, stderr, record string, goRan bool) {
		t.Helper()
		out := filepath.Join(dir, "record")
		if err := os.Remove(out); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append([]string{"GODEBUG=inittrace=1", "FRONT_OUT=" + out}, env...)
		if noFront {
			cmd.Env = append(cmd.Env, "SFORGE_RUNTIME_NO_FRONT=1")
		}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			code = exit.ExitCode()
		default:
			t.Fatalf("%q: %v", args, err)
		}
		var kept []string
		for _, l := range strings.SplitAfter(e.String(), "\n") {
			if strings.HasPrefix(l, "init ") {
				goRan = true
				continue
			}
			kept = append(kept, l)
		}
		b, err := os.ReadFile(out)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return code, o.String(), strings.Join(kept, ""), string(b), goRan
	}
	for _, s := range settings {
		t.Run(s.name, func(t *testing.T) {
			for _, l := range lines {
				if s.passOnly && !l.pass {
					continue
				}
				code, stdout, stderr, record, goRan := run(t, s.env, l.args, false)
				code0, stdout0, stderr0, record0, goRan0 := run(t, s.env, l.args, true)
				if code != code0 || stdout != stdout0 || stderr != stderr0 || record != record0 {
					t.Errorf("%q: with the front: exit %d, stdout %q, stderr %q, runtime saw:\n%s\nwithout: exit %d, stdout %q, stderr %q, runtime saw:\n%s",
						l.args, code, stdout, stderr, record, code0, stdout0, stderr0, record0)
				}
				if !goRan0 {
					t.Errorf("%q: no inittrace line without the front: the check cannot tell who ran", l.args)
				}
				if want := s.fast && l.pass; goRan == want {
					t.Errorf("%q: the front exec'd: %v, want %v", l.args, !goRan, want)
				}
				if s.fast && l.pass && (code != 7 || !strings.HasPrefix(record, fake+"\n")) {
					t.Errorf("%q: exit %d, runtime saw:\n%s", l.args, code, record)
				}
			}
		})
	}
}
