package integration

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sforge-dev/netiso/cniplugin"
	"github.com/sforge-dev/netiso/hook"
	"github.com/sforge-dev/netiso/internal/dnsquery"
	"github.com/sforge-dev/netiso/internal/testbin"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
	"github.com/sforge-dev/netiso/resolver"
)

// TestResolverProcess runs a container's resolver as the hook does, from
// the built sforge-hook, in a network namespace of the test's, for a
// process of the test's: it serves on the namespace's loopback only, as
// nobody, with no socket but its listeners (nothing forwarded); it ends
// with the process and leaves its record, which Collect reads.
func TestResolverProcess(t *testing.T) {
	netns := testenv.NewNetNS(t)
	hookBin := testbin.Build(t, "./cmd/sforge-hook")
	allow, err := policy.Decode("v1;tcp:198.51.100.10:8080;resolver:127.0.0.53;name:judge.sforge.test=198.51.100.10")
	if err != nil {
		t.Fatal(err)
	}
	first := exec.Command("sleep", "300")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill(); _, _ = first.Process.Wait() })
	state := filepath.Join(t.TempDir(), resolver.StateName)
	pid, err := resolver.Start(hookBin, []string{hook.ResolverStage}, netns.Path(), first.Process.Pid, allow, state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	ask := func(name string) dnsmessage.RCode { t.Helper(); return queryIn(t, netns, name) }
	// The sockets are bound when Start returns; the process then drops
	// root and serves.
	if rc := ask("judge.sforge.test."); rc != dnsmessage.RCodeSuccess {
		t.Errorf("pinned name: %s", rc)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil || !strings.Contains(string(status), "Uid:\t65534\t65534\t65534\t65534") || !strings.Contains(string(status), "NoNewPrivs:\t1") {
		t.Errorf("the resolver does not serve as nobody with no_new_privs (%v):\n%s", err, status)
	}
	// Not in the host's namespace: nothing listens on 127.0.0.53 here.
	if c, err := net.DialTimeout("tcp4", "127.0.0.53:53", time.Second); err == nil {
		c.Close()
		t.Fatal("the resolver listens in the host's network namespace")
	}
	for range 3 {
		if rc := ask("leak.tunnel.sforge.invalid."); rc != dnsmessage.RCodeRefused {
			t.Errorf("other name: %s", rc)
		}
	}
	// Nothing forwarded: after the queries the resolver holds no socket
	// but its two listeners.
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	sockets := 0
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			sockets++
		}
	}
	if sockets != 2 {
		t.Errorf("the resolver holds %d sockets, want its 2 listeners", sockets)
	}
	// The process ends: the resolver writes its record and exits.
	_ = first.Process.Kill()
	_, _ = first.Process.Wait()
	o, found, err := resolver.Collect(state, 5*time.Second)
	if err != nil || !found {
		t.Fatalf("collect: found %v, %v", found, err)
	}
	st := o.Stats
	if o.Address != "127.0.0.53" {
		t.Errorf("address %q, want 127.0.0.53", o.Address)
	}
	if st.Answered != 1 || len(st.Refused) != 1 || st.Refused[0] != (resolver.NameCount{Name: "leak.tunnel.sforge.invalid", Count: 3}) {
		t.Errorf("stats %+v", st)
	}
	deadline := time.Now().Add(5 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			t.Fatal("the resolver outlived the process it serves")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the state file is left: %v", err)
	}

	// A resolver that cannot listen (the address is taken) fails the
	// start, with the reason.
	holder := exec.Command("sleep", "300")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _, _ = holder.Process.Wait() })
	var taken net.PacketConn
	if err := netns.Do(func(ns.NetNS) error {
		var err error
		taken, err = net.ListenPacket("udp4", "127.0.0.53:53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = resolver.Start(hookBin, []string{hook.ResolverStage}, netns.Path(), holder.Process.Pid, allow, state)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("start with the address taken: %v", err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("a failed start leaves its state file: %v", err)
	}
}

// TestResolverProcessForPod runs a Pod's resolver as sforge-cni does, from
// the built sforge-cni, with no process to follow: Stop (the CNI DEL) ends
// it and reads its record; one whose DEL never comes ends by itself once
// the sandbox's namespace is unmounted.
func TestResolverProcessForPod(t *testing.T) {
	cniBin := testbin.Build(t, "./cmd/sforge-cni")
	allow, err := policy.Decode("v1;tcp:198.51.100.10:8080;resolver:127.0.0.53;name:judge.sforge.test=198.51.100.10")
	if err != nil {
		t.Fatal(err)
	}
	netns := testenv.NewNetNS(t)
	state := filepath.Join(t.TempDir(), "pod.json")
	pid, err := resolver.Start(cniBin, []string{cniplugin.ResolverStage}, netns.Path(), 0, allow, state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	askIn(t, netns, "leak.tunnel.sforge.invalid.", dnsmessage.RCodeRefused)
	askIn(t, netns, "judge.sforge.test.", dnsmessage.RCodeSuccess)
	if err := resolver.Serving(state); err != nil {
		t.Errorf("serving: %v", err)
	}
	o, found, err := resolver.Stop(state, 5*time.Second)
	if err != nil || !found {
		t.Fatalf("stop: found %v, %v", found, err)
	}
	if o.Address != "127.0.0.53" || o.Stats.Answered != 1 || len(o.Stats.Refused) != 1 || o.Stats.Refused[0].Name != "leak.tunnel.sforge.invalid" {
		t.Errorf("outcome %+v", o)
	}
	waitGone(t, pid, "after Stop")
	if err := resolver.Serving(state); err == nil {
		t.Error("serving after Stop")
	}

	// No DEL: the namespace's mount goes, and so does the resolver.
	other := testenv.NewNetNS(t)
	pid, err = resolver.Start(cniBin, []string{cniplugin.ResolverStage}, other.Path(), 0, allow, state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	askIn(t, other, "judge.sforge.test.", dnsmessage.RCodeSuccess)
	other.Close()
	if err := testutils.UnmountNS(other); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid, "once its namespace was unmounted")
	if o, found, err := resolver.Collect(state, time.Second); err != nil || !found || o.Stats.Answered != 1 {
		t.Errorf("record of the resolver whose namespace went: %+v, found %v, %v", o, found, err)
	}
}

// askIn sends one A query to 127.0.0.53 in netns and checks the reply's
// code.
func askIn(t *testing.T, netns ns.NetNS, name string, want dnsmessage.RCode) {
	t.Helper()
	if rc := queryIn(t, netns, name); rc != want {
		t.Errorf("%s: %s, want %s", name, rc, want)
	}
}

// queryIn sends one A query to 127.0.0.53 in netns and returns the reply's
// code.
func queryIn(t *testing.T, netns ns.NetNS, name string) dnsmessage.RCode {
	t.Helper()
	var rc dnsmessage.RCode
	err := netns.Do(func(ns.NetNS) error {
		var err error
		rc, _, err = dnsquery.Ask("udp4", "127.0.0.53:53", dnsquery.Labels(name), 2*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return rc
}

// waitGone waits, bounded, for pid to end.
func waitGone(t *testing.T, pid int, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the resolver still runs %s", when)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether pid is a live process (not gone, not a zombie
// waiting for a parent that released it).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}
