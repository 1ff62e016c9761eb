package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/engine/priority"
	"github.com/sforge-dev/netiso/internal/testbundle"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
	"github.com/sforge-dev/netiso/shim"
	"github.com/sforge-dev/netiso/shim/front"
)

// TestRuntimeFrontCreate: sforge-runtime's C front does the isolated
// create of a container with a namespace of its own (shim/front/create.c)
// through real runc: the rules are in the container's namespace after
// create, before start, as the Go engine checks them; config.json is left
// as it was; the shim logs the front's line. When the front's engine does
// not install (here: a table of ours is already there, made by a
// createRuntime hook), the Go shim finishes the create it began. CAP_NET_RAW
// is dropped from config.json as the Go shim drops it; runc's own failure
// passes through; a runtime that cannot be executed is the Go shim's to
// report; a front that cannot return from the container's namespace
// deletes the container and fails with one line; a spec the front does not
// read without doubt goes to the Go shim before anything is created.
func TestRuntimeFrontCreate(t *testing.T) {
	if !front.Built {
		t.Fatal("the test binary was built without cgo: sforge-runtime's front is not tested")
	}
	const allow = "v1;tcp:198.51.100.10:8080;dns:10.0.0.2"
	eng, err := engines.New(engines.NFTables)
	if err != nil {
		t.Fatal(err)
	}
	// bundle makes a bundle; with raw, its process keeps CAP_NET_RAW.
	bundle := func(t *testing.T, raw bool, edit func(*specs.Spec)) (*testbundle.Bundle, []byte) {
		b := testbundle.New(t, testbundle.Options{
			Annotations: map[string]string{policy.AnnotationKey: allow},
			Checks:      []string{"loopback", "127.0.0.1"},
			Edit: func(sp *specs.Spec) {
				privateNetNS(sp)
				if edit != nil {
					edit(sp)
				}
			},
		})
		spec, err := os.ReadFile(filepath.Join(b.Dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(spec, []byte("CAP_NET_RAW")) != raw {
			t.Fatalf("harness: CAP_NET_RAW in the bundle's spec: %v, want %v", !raw, raw)
		}
		return b, spec
	}
	// isolated creates the container, checks its rules and the spec, and
	// runs it to the end; it returns the shim's log line for it. created,
	// when set, looks at the created container's process first.
	isolated := func(t *testing.T, s *shimRuntime, b *testbundle.Bundle, spec []byte, id string, created func(pid int)) string {
		t.Helper()
		pid, err := s.create(t, b, id)
		if err != nil {
			t.Fatalf("create: %v\n%s", err, s.output(b, id))
		}
		if created != nil {
			created(pid)
		}
		if st := s.status(t, id); st != "created" {
			t.Fatalf("status after create %q, want created", st)
		}
		if err := eng.Check(engine.Target{NetNS: fmt.Sprintf("/proc/%d/ns/net", pid), ID: id}, mustDecode(t, allow)); err != nil {
			t.Fatalf("rules in the container's namespace after create, before start: %v", err)
		}
		if after, err := os.ReadFile(filepath.Join(b.Dir, "config.json")); err != nil || !bytes.Equal(after, spec) {
			t.Fatalf("config.json changed by the create (%v):\n%s", err, after)
		}
		if b.Ran() {
			t.Fatal("the container's process ran before start")
		}
		s.must(t, "start", id)
		s.waitStopped(t, id)
		if !b.Ran() {
			t.Fatalf("the process did not run after start:\n%s", s.output(b, id))
		}
		s.must(t, "delete", id)
		log, _ := os.ReadFile(s.logPath())
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, "container "+id+": isolated before start (engine=nftables") {
				return l
			}
		}
		t.Fatalf("no install logged for %s:\n%s", id, log)
		return ""
	}

	t.Run("installs", func(t *testing.T) {
		s := newShimRuntime(t, engines.Auto)
		// An escape where the front does not read (encoding/json writes
		// "&" as \u0026).
		b, spec := bundle(t, false, func(sp *specs.Spec) { sp.Annotations["note"] = "a && b" })
		if !bytes.Contains(spec, []byte(`\u0026`)) {
			t.Fatal("harness: the spec holds no escape")
		}
		const id = "front-create"
		// The install window's real-time priority is not the
		// container's: its process was made before, and keeps the
		// host's normal scheduling.
		line := isolated(t, s, b, spec, id, func(pid int) { requireNormalScheduling(t, pid) })
		t.Logf("shim log: %s", line)
		table, err := policy.ChainName(id)
		if err != nil {
			t.Fatal(err)
		}
		// queued: the install's wait for a CPU, which the benchmarks
		// subtract (/proc/thread-self/schedstat is always there on Linux).
		if !strings.Contains(line, "table="+table+" ") || !strings.Contains(line, "endpoints=1 resolvers=1") || !strings.HasSuffix(line, ` front=c)"`) ||
			!regexp.MustCompile(` switches=\d+/\d+ queued=\S+ priority=realtime spec=`).MatchString(line) ||
			!strings.HasPrefix(line, `time="`) || !strings.Contains(line, ` level=info msg="sforge-runtime: container `) {
			t.Fatalf("log line %q, want the front's", line)
		}
	})
	t.Run("normal priority", func(t *testing.T) {
		// SFORGE_INSTALL_PRIORITY=normal: the same install, at the
		// host's normal scheduling.
		s := newShimRuntime(t, engines.Auto, priority.EnvVar+"="+priority.Normal)
		b, spec := bundle(t, false, nil)
		if line := isolated(t, s, b, spec, "front-normal", nil); !strings.Contains(line, " priority=normal spec=") || !strings.HasSuffix(line, ` front=c)"`) {
			t.Fatalf("log line %q, want the front's at normal priority", line)
		}
	})
	t.Run("user namespace", func(t *testing.T) {
		// Docker's --userns-remap: the container's network namespace
		// belongs to a user namespace runc makes for it. Root is mapped
		// to itself here so that the probe can write its marker in the
		// test's directories; the namespaces are what the front meets.
		s := newShimRuntime(t, engines.Auto)
		b, spec := bundle(t, false, func(sp *specs.Spec) {
			sp.Linux.Namespaces = append(sp.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
			m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0, Size: 65536}}
			sp.Linux.UIDMappings, sp.Linux.GIDMappings = m, m
		})
		const id = "front-userns"
		var owner string
		line := isolated(t, s, b, spec, id, func(pid int) { owner = netnsOwner(t, pid) })
		if !strings.HasSuffix(line, ` front=c)"`) {
			t.Fatalf("log line %q, want the front's", line)
		}
		host, err := os.Readlink("/proc/self/ns/user")
		if err != nil {
			t.Fatal(err)
		}
		if owner == "" || owner == host {
			t.Fatalf("harness: the container's network namespace belongs to user namespace %q, want one of its own (the host's is %s)", owner, host)
		}
	})
	t.Run("hands over", func(t *testing.T) {
		const id = "front-handover"
		table, err := policy.ChainName(id)
		if err != nil {
			t.Fatal(err)
		}
		nft, err := exec.LookPath("nft")
		if err != nil {
			t.Fatalf("nft (the nftables package) is needed to make the table in the hook: %v", err)
		}
		// The hook runs in the runtime's namespaces, after runc made the
		// container's: it makes a table of our name in the container's.
		hook := filepath.Join(t.TempDir(), "make-table")
		script := fmt.Sprintf("#!/bin/sh\npid=$(sed -n 's/.*\"pid\":\\([0-9][0-9]*\\).*/\\1/p')\nexec nsenter -t \"$pid\" -n %s add table inet %s\n", nft, table)
		if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		s := newShimRuntime(t, engines.NFTables)
		b, spec := bundle(t, false, func(sp *specs.Spec) {
			sp.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: hook, Args: []string{"make-table"}}}}
		})
		if line := isolated(t, s, b, spec, id, nil); !strings.Contains(line, " front=c+go)") {
			t.Fatalf("log line %q, want the Go shim's after the front's create", line)
		}
	})
	t.Run("namespace by path moved", func(t *testing.T) {
		// The spec names namespace A through a link that a createRuntime
		// hook points at B once runc has joined A: after the create the
		// path no longer names the container's namespace. The front
		// installs in neither; the Go shim it hands the container to
		// refuses with one line and deletes it.
		a, other := testenv.NewNetNS(t), testenv.NewNetNS(t)
		link := filepath.Join(t.TempDir(), "netns")
		if err := os.Symlink(a.Path(), link); err != nil {
			t.Fatal(err)
		}
		hook := filepath.Join(t.TempDir(), "move-link")
		if err := os.WriteFile(hook, []byte(fmt.Sprintf("#!/bin/sh\nexec ln -sfn %s %s\n", other.Path(), link)), 0o755); err != nil {
			t.Fatal(err)
		}
		s := newShimRuntime(t, engines.Auto)
		b := testbundle.New(t, testbundle.Options{
			NetNS: link, Annotations: map[string]string{policy.AnnotationKey: allow}, Checks: []string{"loopback", "127.0.0.1"},
			Edit: func(sp *specs.Spec) {
				sp.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: hook, Args: []string{"move-link"}}}}
			},
		})
		const id = "front-netns-moved"
		_, err := s.create(t, b, id)
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("create: %v, want a failure\n%s", err, s.output(b, id))
		}
		want := "container " + id + " refused: its process is not in the network namespace its spec names (" + link + "); the container was deleted without starting"
		out := s.output(b, id)
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(lines[0], want) {
			t.Fatalf("create's output %q, want one line: %s", out, want)
		}
		if st := s.status(t, id); st != "" {
			t.Fatalf("container %s is %s after the failed create, want deleted", id, st)
		}
		if b.Ran() {
			t.Fatal("the container's process ran")
		}
		requireNoChains(t, a)
		requireNoChains(t, other)
	})
	t.Run("runc fails", func(t *testing.T) {
		s := newShimRuntime(t, engines.Auto)
		b, _ := bundle(t, false, func(sp *specs.Spec) { sp.Process.Args = []string{"/no/such/program"} })
		const id = "front-runc-fails"
		_, err := s.create(t, b, id)
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("create: %v, want runc's failure", err)
		}
		plainOut, perr := exec.Command(s.runc, "--root", s.root, "create", "--bundle", b.Dir, id+"-plain").CombinedOutput()
		var pe *exec.ExitError
		if !errors.As(perr, &pe) || pe.ExitCode() != ee.ExitCode() {
			t.Fatalf("runc alone: %v (%s); through the front: status %d", perr, plainOut, ee.ExitCode())
		}
		if out := s.output(b, id); strings.Contains(out, "sforge-runtime") || !strings.Contains(out, "no such file or directory") {
			t.Fatalf("create's output should be runc's alone:\n%s", out)
		}
		if st := s.status(t, id); st != "" {
			t.Fatalf("container exists after a failed create: %s", st)
		}
		if log, _ := os.ReadFile(s.logPath()); bytes.Contains(log, []byte(id)) {
			t.Fatalf("the shim logged a container runc did not create:\n%s", log)
		}
	})
	t.Run("drops NET_RAW", func(t *testing.T) {
		// As `docker run --runtime sforge -e SFORGE_EGRESS=...` has it:
		// the front drops the capability from config.json, as the Go
		// shim would, before runc reads it.
		s := newShimRuntime(t, engines.Auto)
		b, _ := bundle(t, true, func(sp *specs.Spec) {
			c := sp.Process.Capabilities
			c.Bounding, c.Effective, c.Permitted = append(c.Bounding, "CAP_NET_RAW"), append(c.Effective, "CAP_NET_RAW"), append(c.Permitted, "CAP_NET_RAW")
		})
		const id = "front-drops-net-raw"
		if _, err := s.create(t, b, id); err != nil {
			t.Fatalf("create: %v\n%s", err, s.output(b, id))
		}
		spec := readSpec(t, b)
		c := spec.Process.Capabilities
		for _, set := range [][]string{c.Bounding, c.Effective, c.Permitted, c.Inheritable, c.Ambient} {
			if slices.Contains(set, "CAP_NET_RAW") {
				t.Fatalf("CAP_NET_RAW kept in config.json: %+v", c)
			}
		}
		if len(c.Bounding) == 0 || len(c.Effective) == 0 {
			t.Fatalf("capabilities lost with CAP_NET_RAW: %+v", c)
		}
		s.must(t, "start", id)
		s.waitStopped(t, id)
		s.must(t, "delete", id)
		log, _ := os.ReadFile(s.logPath())
		if !bytes.Contains(log, []byte("container "+id+": isolated before start (engine=nftables")) || !bytes.Contains(log, []byte(` front=c), CAP_NET_RAW dropped"`)) {
			t.Fatalf("shim log %q, want the front's line", log)
		}
	})
	t.Run("cannot return", func(t *testing.T) {
		// The front's thread enters the container's namespace for its
		// netlink socket and cannot come back (setns refused, as only a
		// seccomp filter can make it): it deletes the container, and the
		// create fails with one line.
		s := newShimRuntime(t, engines.Auto)
		s.wrap = []string{denySetns(t), "4"} // the schedstat is 3; open_netns leaves 4 free for the way back, the target on 5
		b, _ := bundle(t, false, nil)
		const id = "front-cannot-return"
		_, err := s.create(t, b, id)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("create: %v, want status 1\n%s", err, s.output(b, id))
		}
		const want = "container " + id + " refused: failed to install the egress rules: cannot return to the runtime's own network namespace (Operation not permitted); the container was deleted without starting"
		out := s.output(b, id)
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "sforge-runtime: "+want) {
			t.Fatalf("create's output %q, want one line: %s", out, want)
		}
		if st := s.status(t, id); st != "" {
			t.Fatalf("container %s is %s after the failed create, want deleted", id, st)
		}
		if b.Ran() {
			t.Fatal("the container's process ran")
		}
		for _, log := range []string{s.logPath(), s.runcLogPath()} {
			if data, _ := os.ReadFile(log); !bytes.Contains(data, []byte(want)) {
				t.Fatalf("%s does not say why:\n%s", log, data)
			}
		}
	})
	t.Run("runtime does not start", func(t *testing.T) {
		// runc cannot be executed: the front's child reports the exec's
		// failure, nothing was created, and the Go shim says why.
		s := newShimRuntime(t, engines.Auto)
		notExec := filepath.Join(t.TempDir(), "runc")
		if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		writeShimConfig(t, filepath.Join(s.dir, "runtime.json"), shim.Config{Runtime: notExec, Hook: s.hook, Log: s.logPath()})
		b, _ := bundle(t, false, nil)
		const id = "front-no-runtime"
		_, err = s.create(t, b, id)
		var ee *exec.ExitError
		out := s.output(b, id)
		if !errors.As(err, &ee) || !strings.Contains(out, notExec) || !strings.Contains(out, "permission denied") {
			t.Fatalf("create: %v, want a failure naming %s and why:\n%s", err, notExec, out)
		}
		if st := s.status(t, id); st != "" {
			t.Fatalf("container %s is %s, want none", id, st)
		}
		if b.Ran() {
			t.Fatal("the container's process ran")
		}
	})
	for _, tc := range []struct {
		name, env, want string
	}{
		// JSON escapes in the environment (encoding/json writes "<" as
		// \u003c, a newline as \n): the front does not decode the strings
		// it reads. An entry that is plainly not the allowlist's before
		// its first escape (sforge run's prompt) is not ours: the front's
		// create. One whose escape comes within "SFORGE_EGRESS=" may be
		// (here it decodes to another name, which only Go can tell): the
		// Go shim's create (it makes the namespace, here), logged with the
		// front's reason.
		{"escaped environment", "NOTE=<escaped>\nacross lines", " front=c)"},
		{"left to Go", "SFORGE_EGRESS<X=1", " front=go: an allowlist or member the front is not sure of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newShimRuntime(t, engines.Auto)
			b, _ := bundle(t, false, func(sp *specs.Spec) { sp.Process.Env = append(sp.Process.Env, tc.env) })
			if raw, _ := os.ReadFile(filepath.Join(b.Dir, "config.json")); !bytes.Contains(raw, []byte(`\u003c`)) {
				t.Fatalf("config.json holds no escape:\n%s", raw)
			}
			id := "front-" + strings.ReplaceAll(tc.name, " ", "-")
			if _, err := s.create(t, b, id); err != nil {
				t.Fatalf("create: %v\n%s", err, s.output(b, id))
			}
			s.must(t, "delete", "--force", id)
			log, _ := os.ReadFile(s.logPath())
			if !bytes.Contains(log, []byte("container "+id+": isolated before start")) || !bytes.Contains(log, []byte(tc.want)) {
				t.Fatalf("shim log %q, want %q", log, tc.want)
			}
		})
	}
}

// netnsOwner names the user namespace that owns pid's network namespace.
func netnsOwner(t *testing.T, pid int) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		t.Fatalf("NS_GET_USERNS: %v", err)
	}
	defer unix.Close(fd)
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	return link
}

// denySetns builds testdata/deny-setns.c: a program that runs another with
// setns refused (EPERM) for one descriptor number.
func denySetns(t *testing.T) string {
	t.Helper()
	cc := testenv.RequireBinary(t, "gcc")
	out := filepath.Join(t.TempDir(), "deny-setns")
	if msg, err := exec.Command(cc, "-O2", "-Wall", "-Werror", "-o", out, "testdata/deny-setns.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc deny-setns.c: %v\n%s", err, msg)
	}
	return out
}

// requireNormalScheduling fails unless process pid runs at the host's
// normal scheduling: what sforge's real-time install window must not
// pass on to a container.
func requireNormalScheduling(t *testing.T, pid int) {
	t.Helper()
	a, err := unix.SchedGetAttr(pid, 0)
	if err != nil {
		t.Fatalf("scheduling of process %d: %v", pid, err)
	}
	if a.Policy != unix.SCHED_NORMAL || a.Priority != 0 {
		t.Fatalf("process %d: scheduling policy %d priority %d, want SCHED_NORMAL", pid, a.Policy, a.Priority)
	}
}
