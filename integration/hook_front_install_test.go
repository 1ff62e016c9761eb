package integration

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/nftables"
	"github.com/sforge-dev/netiso/engine/priority"
	"github.com/sforge-dev/netiso/hook/front"
	"github.com/sforge-dev/netiso/internal/testbundle"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
)

// TestHookFrontInstall runs the built sforge-hook's createRuntime, its
// state on a pipe as runc gives it, for a process in a test namespace: with
// the front (hook/front) the C engine installs the table and the Go
// runtime never starts (no GODEBUG=inittrace line), without it the Go hook
// does; either way the Go engine's Check accepts what is in the kernel,
// the hook is silent and its log has the install line. Where the front is
// not sure (a table already there, a refusal), the Go hook does the work
// and the user reads the Go hook's message. A front that cannot return from
// the container's namespace fails the hook with one line, and installs
// nothing. The lifecycles through real runc and podman elsewhere in this
// package run with the front as built.
func TestHookFrontInstall(t *testing.T) {
	if !front.Built {
		t.Fatal("the test binary was built without cgo: sforge-hook's front is not tested")
	}
	hookBin := testbundle.Build(t).Hook
	n := testenv.NewNetNS(t)
	sleeper := sleepIn(t, n)
	const value = "v1;tcp:198.51.100.10:8080;udp:198.51.100.0/24:4000;tcp:198.51.100.7:8080;dns:198.51.100.53;else:drop"
	allow := mustDecode(t, value)
	bundle := testbundle.New(t, testbundle.Options{NetNS: n.Path(), Annotations: map[string]string{policy.AnnotationKey: value}})
	eng := nftables.New()

	var wrap []string // a program (and its arguments) that runs the hook
	run := func(t *testing.T, id string, b *testbundle.Bundle, withFront bool, args ...string) (stderr string, goRan bool, err error) {
		t.Helper()
		argv := append(append(append([]string{}, wrap...), hookBin, "createRuntime", "--log", b.LogFile), args...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.0.2","id":%q,"status":"creating","pid":%d,"bundle":%q}`, id, sleeper.Process.Pid, b.Dir))
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		if !withFront {
			cmd.Env = append(cmd.Env, front.DisableEnv+"=1")
		}
		var stdout, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &errb
		err = cmd.Run()
		if stdout.Len() != 0 {
			t.Fatalf("the hook wrote %q on stdout", stdout.String())
		}
		var lines []string
		for _, l := range strings.Split(errb.String(), "\n") {
			if strings.HasPrefix(l, "init ") {
				goRan = true
			} else if l != "" {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n"), goRan, err
	}
	installLine := func(t *testing.T, b *testbundle.Bundle, id string) string {
		t.Helper()
		for _, l := range strings.Split(b.Log(), "\n") {
			if strings.Contains(l, " install container="+id+" ") {
				return l
			}
		}
		t.Fatalf("no install line for %s in the hook's log:\n%s", id, b.Log())
		return ""
	}

	for _, withFront := range []bool{true, false} {
		t.Run(map[bool]string{true: "front", false: "no front"}[withFront], func(t *testing.T) {
			id := map[bool]string{true: "front-install", false: "go-install"}[withFront]
			stderr, goRan, err := run(t, id, bundle, withFront)
			if err != nil || stderr != "" {
				t.Fatalf("createRuntime: %v, stderr %q", err, stderr)
			}
			if goRan == withFront {
				t.Fatalf("the Go runtime started: %v, with the front: %v", goRan, withFront)
			}
			line := installLine(t, bundle, id)
			if want := " engine=nftables chain="; !strings.Contains(line, want) || !strings.Contains(line, " rules=") || !strings.Contains(line, " ipv6=filtered duration=") {
				t.Fatalf("install line %q lacks the Go hook's fields", line)
			}
			if byFront := strings.HasSuffix(line, " front=c"); byFront != withFront {
				t.Fatalf("install line %q: by the front %v, want %v", line, byFront, withFront)
			}
			if withFront && !regexp.MustCompile(` cpu=\S+ switches=\d+/\d+ queued=\S+ priority=realtime front=c$`).MatchString(line) {
				t.Fatalf("install line %q: want the front's CPU time, switches, wait for a CPU and real-time window", line)
			}
			target := engine.Target{NetNS: n.Path(), ID: id}
			if err := eng.Check(target, allow); err != nil {
				t.Fatalf("the Go engine's check of what createRuntime installed: %v", err)
			}
			if err := eng.Remove(target); err != nil {
				t.Fatal(err)
			}
		})
	}
	requireNoChains(t, n)

	t.Run("normal priority", func(t *testing.T) {
		// SFORGE_INSTALL_PRIORITY=normal (a hooks.d entry's env): the
		// front installs at the host's normal scheduling.
		t.Setenv(priority.EnvVar, priority.Normal)
		const id = "front-normal"
		if stderr, goRan, err := run(t, id, bundle, true); err != nil || stderr != "" || goRan {
			t.Fatalf("createRuntime: %v, stderr %q, Go ran %v", err, stderr, goRan)
		}
		if line := installLine(t, bundle, id); !strings.HasSuffix(line, " priority=normal front=c") {
			t.Fatalf("install line %q, want the front's at normal priority", line)
		}
		if err := eng.Remove(engine.Target{NetNS: n.Path(), ID: id}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("table already there", func(t *testing.T) {
		// A second createRuntime for one id (a retried start): the front
		// leaves the replacement to the Go engine.
		const id = "front-again"
		target := engine.Target{NetNS: n.Path(), ID: id}
		if _, err := eng.Install(target, mustDecode(t, "v1;tcp:198.51.100.99:1")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = eng.Remove(target) })
		stderr, goRan, err := run(t, id, bundle, true)
		if err != nil || stderr != "" || !goRan {
			t.Fatalf("createRuntime: %v, stderr %q, Go ran %v (want the Go hook)", err, stderr, goRan)
		}
		// The Go hook's line, with why the front left it the install.
		if line := installLine(t, bundle, id); !strings.HasSuffix(line, " front=go: its engine did not install (our table there already, or the kernel refused)") {
			t.Fatalf("install line %q, want the Go hook's with the front's reason", line)
		}
		if err := eng.Check(target, allow); err != nil {
			t.Fatalf("after createRuntime: %v", err)
		}
	})

	t.Run("cannot return", func(t *testing.T) {
		// The front's thread enters the namespace for its netlink socket
		// and cannot come back (setns refused, as only a seccomp filter
		// can make it): the container must not start, and nothing of ours
		// is installed.
		wrap = []string{denySetns(t), "6"} // the state's memory file is 3, the schedstat 4, the target 5, the way back 6
		defer func() { wrap = nil }()
		const id = "front-stuck"
		stderr, goRan, err := run(t, id, bundle, true)
		const want = "sforge-hook: container " + id + ": failed to install the egress rules: cannot return to the hook's own network namespace: Operation not permitted; the container was not started"
		if err == nil || goRan || !strings.HasPrefix(stderr, want) || strings.Contains(stderr, "\n") {
			t.Fatalf("createRuntime: %v, Go ran %v, stderr %q; want a failure and one line: %s", err, goRan, stderr, want)
		}
		if !strings.Contains(bundle.Log(), "refuse stage=createRuntime container "+id+": failed to install the egress rules: cannot return") {
			t.Fatalf("the hook's log does not say why:\n%s", bundle.Log())
		}
		if left := nftOurs(t, n); len(left) > 0 {
			t.Fatalf("tables installed by a hook that could not return: %v", left)
		}
	})
	t.Run("refusal", func(t *testing.T) {
		// A process with CAP_NET_ADMIN: the Go hook refuses, in its words.
		b := testbundle.New(t, testbundle.Options{NetNS: n.Path(), Annotations: map[string]string{policy.AnnotationKey: value},
			Edit: func(s *specs.Spec) {
				s.Process.Capabilities.Bounding = append(s.Process.Capabilities.Bounding, "CAP_NET_ADMIN")
			}})
		stderr, goRan, err := run(t, "front-refused", b, true)
		if err == nil || !goRan || !strings.Contains(stderr, "sforge-hook: container front-refused: the process holds CAP_NET_ADMIN (bounding)") {
			t.Fatalf("createRuntime: %v, Go ran %v, stderr %q; want the Go hook's refusal", err, goRan, stderr)
		}
		if left := nftOurs(t, n); len(left) > 0 {
			t.Fatalf("a refused container left tables: %v", left)
		}
	})
	requireNoChains(t, n)
}
