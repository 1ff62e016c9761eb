package integration

// Shared pieces of the runtime registration tests (runtime_*_test.go,
// install_*_test.go): the built binaries, a scratch image's rootfs, the
// "judge" and "internet" servers, the probe's report, and the guard on the
// host's own iptables rules. Names start with "reg" to stay clear of the
// other suites in this package.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/internal/testbin"
	"github.com/sforge-dev/netiso/internal/testdocker"
	"github.com/sforge-dev/netiso/internal/testenv"
)

// The "world" every runtime test wires: a judge with an allowed and a
// forbidden TCP port and a UDP echo, an "internet" host, and an IPv6 judge
// address. All are TEST-NET / documentation addresses on a dummy interface
// inside a namespace the test created.
const (
	regJudge4      = "198.51.100.10"
	regJudgeTCP    = regJudge4 + ":8080"
	regJudgeOther  = regJudge4 + ":8081"
	regJudgeUDP    = regJudge4 + ":5353"
	regInternetTCP = "203.0.113.10:80"
	regJudge6      = "2001:db8::10"
	regJudge6TCP   = "[" + regJudge6 + "]:8080"
	regAllowlist   = "v1;tcp:" + regJudgeTCP
)

var (
	regBuildOnce sync.Once
	regBuildErr  error
	regRoot      string
)

// regBinaries builds sforge, sforge-runtime, sforge-hook and sforge-probe
// (static, as `make build` does) into <module>/bin once per test run and
// returns <module>, the --prefix whose bin/ holds them.
func regBinaries(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	regBuildOnce.Do(func() {
		root, err := filepath.Abs("..")
		if err != nil {
			regBuildErr = err
			return
		}
		regRoot = root
		if _, err := os.Stat(filepath.Join(root, "cmd", "sforge-probe")); err != nil {
			regBuildErr = fmt.Errorf("cmd/sforge-probe is missing: %w", err)
			return
		}
		for _, pkg := range []string{"./cmd/sforge", "./cmd/sforge-runtime", "./cmd/sforge-hook", "./cmd/sforge-probe"} {
			cmd := testbin.Command("go", filepath.Join(root, "bin", filepath.Base(pkg)), pkg)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				regBuildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if regBuildErr != nil {
		testenv.Require(t, false, regBuildErr.Error())
	}
	return regRoot
}

// regRootfs makes an image root: the static probe, busybox and the applets
// the tests use (sh, nslookup for Docker's embedded DNS, httpd as the
// neighbour's server, grep/cat for /proc/self/status, touch for markers).
func regRootfs(t *testing.T, prefix string) string {
	t.Helper()
	busybox := testenv.RequireBinary(t, "busybox")
	dir := t.TempDir()
	for _, d := range []string{"bin", "etc", "m", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, busybox, filepath.Join(dir, "bin", "busybox"))
	copyFile(t, filepath.Join(prefix, "bin", "sforge-probe"), filepath.Join(dir, "sforge-probe"))
	for _, applet := range []string{"sh", "nslookup", "httpd", "grep", "cat", "touch", "sleep", "echo"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0:root:/:/bin/sh\n"), 0o644)
	return dir
}

// copyFile copies from to to, executable, making to's directory.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// regWorld puts the judge and internet addresses on n's loopback (this
// kernel has no dummy interfaces) and serves them from there: TCP 8080 (allowed), 8081 (not allowed),
// UDP 5353 echo, TCP 80 on the internet address, TCP 8080 on IPv6. A
// container whose traffic reaches n (bridge gateway, veth) finds them
// there, as local addresses of n.
func regWorld(t *testing.T, n ns.NetNS) {
	t.Helper()
	var closers []func()
	t.Cleanup(func() {
		for _, c := range closers {
			c()
		}
	})
	err := n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		for _, a := range []string{regJudge4 + "/32", "203.0.113.10/32", regJudge6 + "/128"} {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			addr.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(l, addr); err != nil {
				return fmt.Errorf("add %s: %w", a, err)
			}
		}
		// Forwarding is on for Docker's bridge already; make sure the IPv6
		// judge answers across the bridge too. Interfaces the runtime
		// creates here later (its bridge) skip duplicate address detection,
		// so their IPv6 gateway address is usable at once, not seconds later.
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644)
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/default/accept_dad", []byte("0"), 0o644)
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/all/accept_dad", []byte("0"), 0o644)
		for _, spec := range []struct{ network, addr string }{
			{"tcp4", regJudgeTCP}, {"tcp4", regJudgeOther}, {"tcp4", regInternetTCP}, {"tcp6", regJudge6TCP},
		} {
			ln, err := net.Listen(spec.network, spec.addr)
			if err != nil {
				return err
			}
			closers = append(closers, func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					_, _ = c.Write([]byte("hello\n"))
					c.Close()
				}
			}()
		}
		pc, err := net.ListenPacket("udp4", regJudgeUDP)
		if err != nil {
			return err
		}
		closers = append(closers, func() { pc.Close() })
		go func() {
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(buf[:n], from)
			}
		}()
		return nil
	})
	if err != nil {
		t.Fatalf("failed to set up the judge and internet servers: %v", err)
	}
}

// regProbeResult is one line of sforge-probe's report.
type regProbeResult struct {
	Check  string `json:"check"`
	Target string `json:"target"`
	OK     bool   `json:"ok"`
	Error  string `json:"error"`
}

// regParseProbe reads the probe's JSON lines out of mixed output.
func regParseProbe(out string) map[string]regProbeResult {
	res := map[string]regProbeResult{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r regProbeResult
		if json.Unmarshal([]byte(line), &r) == nil && r.Check != "" {
			res[r.Check+" "+r.Target] = r
		}
	}
	return res
}

// regExpect checks a probe report: every key must be present with the
// wanted reachability.
func regExpect(t *testing.T, out string, want map[string]bool) {
	t.Helper()
	got := regParseProbe(out)
	for k, ok := range want {
		r, found := got[k]
		switch {
		case !found:
			t.Errorf("probe did not report %q; output:\n%s", k, out)
		case r.OK != ok:
			t.Errorf("%s: reachable=%v, want %v (%s)", k, r.OK, ok, r.Error)
		}
	}
}

// regDockerWithSforge starts a private dockerd wired to the world,
// registers the sforge runtime the way users do (`sforge install
// --docker`) and imports the probe image under the given name.
func regDockerWithSforge(t *testing.T, prefix, image string) *testdocker.Daemon {
	t.Helper()
	d := testdocker.Start(t, testdocker.Options{})
	regWorld(t, d.NetNS)
	env := []string{"DOCKER_HOST=" + d.Host}
	if out, err := regSforge(t, prefix, env, "install", "--docker", "--docker-config", d.ConfigFile, "--prefix", prefix); err != nil {
		t.Fatalf("sforge install --docker: %v\n%s", err, out)
	}
	d.ImportImage(t, image, regRootfs(t, prefix))
	return d
}

// regRuntimeChecks is the matrix every runtime acceptance test (Docker,
// podman, containerd) runs in its isolated container: the allowed judge
// port reached, everything else of the world and the neighbour (nb4, nb6)
// refused, loopback kept. open is the same checks all expected reachable,
// for the control container without an allowlist.
func regRuntimeChecks(nb4, nb6 string) (checks, open map[string]bool) {
	checks, _ = regWorldChecks()
	checks["tcp "+nb4+":9000"] = false
	checks["tcp6 ["+nb6+"]:9000"] = false
	return checks, regOpen(checks)
}

// regWorldChecks is regRuntimeChecks without a neighbour, for networks
// that give each container a network of its own (slirp4netns).
func regWorldChecks() (checks, open map[string]bool) {
	checks = map[string]bool{
		"tcp " + regJudgeTCP:    true,
		"tcp " + regJudgeOther:  false,
		"udp " + regJudgeUDP:    false,
		"icmp " + regJudge4:     false,
		"tcp " + regInternetTCP: false,
		"tcp6 " + regJudge6TCP:  false,
		"loopback 127.0.0.1":    true,
	}
	return checks, regOpen(checks)
}

// regOpen is checks with every target reachable.
func regOpen(checks map[string]bool) map[string]bool {
	open := map[string]bool{}
	for k := range checks {
		open[k] = true
	}
	return open
}

// regProbeArgs turns a check list into the probe's argv.
func regProbeArgs(checks map[string]bool) []string {
	var args []string
	for k := range checks {
		check, target, _ := strings.Cut(k, " ")
		args = append(args, check, target)
	}
	return args
}

// capBit reports whether capability number c is set in a hex mask from
// /proc/<pid>/status.
func capBit(t *testing.T, status, field string, c uint) bool {
	t.Helper()
	m := regexp.MustCompile(field + `:\s*([0-9a-f]+)`).FindStringSubmatch(status)
	if m == nil {
		t.Fatalf("no %s in:\n%s", field, status)
	}
	var v uint64
	fmt.Sscanf(m[1], "%x", &v)
	return v&(1<<c) != 0
}

const capNetRaw = 13

// regHostGuard snapshots the host's iptables rules (both backends, both
// families) and, when the test ends, compares: a change means rules landed
// in the host's namespace; the snapshot is restored and the test fails.
func regHostGuard(t *testing.T) {
	t.Helper()
	type snap struct{ save, restore, text string }
	var snaps []snap
	for _, v := range []string{"nft", "legacy"} {
		for _, fam := range []string{"iptables", "ip6tables"} {
			save := fam + "-" + v + "-save"
			if _, err := exec.LookPath(save); err != nil {
				continue
			}
			out, err := exec.Command(save).Output()
			if err != nil {
				t.Fatalf("%s: %v", save, err)
			}
			snaps = append(snaps, snap{save, fam + "-" + v + "-restore", string(out)})
		}
	}
	t.Cleanup(func() {
		for _, s := range snaps {
			out, err := exec.Command(s.save).Output()
			if err != nil {
				t.Errorf("%s: %v", s.save, err)
				continue
			}
			if normalizeSave(string(out)) == normalizeSave(s.text) {
				continue
			}
			t.Errorf("HOST FIREWALL CHANGED during the test (%s):\nbefore:\n%s\nafter:\n%s", s.save, s.text, out)
			cmd := exec.Command(s.restore)
			cmd.Stdin = strings.NewReader(s.text)
			if o, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("FAILED TO RESTORE the host's rules with %s: %v\n%s", s.restore, err, o)
			}
		}
	})
}

var regCounters = regexp.MustCompile(`\[\d+:\d+\]`)

func normalizeSave(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "#") || l == "" {
			continue
		}
		b.WriteString(regCounters.ReplaceAllString(l, "") + "\n")
	}
	return b.String()
}

// regSforge runs the built sforge CLI with extra environment.
func regSforge(t *testing.T, prefix string, env []string, args ...string) (string, error) {
	t.Helper()
	return regSforgeAs(t, nil, prefix, env, args...)
}

// regSforgeAs is regSforge run as the user cred names (nil: as the test).
func regSforgeAs(t *testing.T, cred *syscall.Credential, prefix string, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(prefix, "bin", "sforge"), args...)
	cmd.Env = append(os.Environ(), env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

// regMustNotExist fails when the marker a refused container would have
// written exists.
func regMustNotExist(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Errorf("%s: the container's process ran (marker %s exists): it must never start", what, path)
	}
}

// regLANMember is a namespace attached to a regLAN bridge.
type regLANMember struct {
	NS     ns.NetNS
	IPv4   string
	IPv6   string
	Bridge string
}

// regLAN builds, in host, a bridge with gateway addresses 192.0.2.1/24 and
// 2001:db8:2::1/64 and attaches n fresh namespaces to it (eth0 at
// 192.0.2.2.., 2001:db8:2::2.., default routes via the gateway). It is
// what a runtime's bridge network looks like, for runtimes the tests drive
// with a namespace they made (ctr run --with-ns).
func regLAN(t *testing.T, host ns.NetNS, n int) []regLANMember {
	t.Helper()
	tag := fmt.Sprintf("%05d", time.Now().UnixNano()%100000)
	br := "sfb" + tag
	var members []regLANMember
	err := host.Do(func(ns.NetNS) error {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br}}); err != nil {
			return fmt.Errorf("add bridge: %w", err)
		}
		bl, err := netlink.LinkByName(br)
		if err != nil {
			return err
		}
		for _, a := range []string{"192.0.2.1/24", "2001:db8:2::1/64"} {
			addr, _ := netlink.ParseAddr(a)
			addr.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(bl, addr); err != nil {
				return err
			}
		}
		_ = os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644)
		return netlink.LinkSetUp(bl)
	})
	if err != nil {
		t.Fatalf("failed to create the LAN bridge: %v", err)
	}
	for i := 0; i < n; i++ {
		m := regLANMember{NS: testenv.NewNetNS(t), IPv4: fmt.Sprintf("192.0.2.%d", i+2), IPv6: fmt.Sprintf("2001:db8:2::%d", i+2), Bridge: br}
		hostSide := fmt.Sprintf("sfv%s%d", tag, i)
		err := host.Do(func(ns.NetNS) error {
			bl, err := netlink.LinkByName(br)
			if err != nil {
				return err
			}
			veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostSide, MasterIndex: bl.Attrs().Index}, PeerName: hostSide + "p"}
			if err := netlink.LinkAdd(veth); err != nil {
				return fmt.Errorf("add veth: %w", err)
			}
			hl, err := netlink.LinkByName(hostSide)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(hl); err != nil {
				return err
			}
			peer, err := netlink.LinkByName(hostSide + "p")
			if err != nil {
				return err
			}
			return netlink.LinkSetNsFd(peer, int(m.NS.Fd()))
		})
		if err != nil {
			t.Fatalf("failed to attach namespace %d: %v", i, err)
		}
		err = m.NS.Do(func(ns.NetNS) error {
			l, err := netlink.LinkByName(hostSide + "p")
			if err != nil {
				return err
			}
			if err := netlink.LinkSetName(l, "eth0"); err != nil {
				return err
			}
			for _, a := range []string{m.IPv4 + "/24", m.IPv6 + "/64"} {
				addr, _ := netlink.ParseAddr(a)
				addr.Flags = unix.IFA_F_NODAD
				if err := netlink.AddrAdd(l, addr); err != nil {
					return err
				}
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			for _, gw := range []string{"192.0.2.1", "2001:db8:2::1"} {
				if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
					return fmt.Errorf("route via %s: %w", gw, err)
				}
			}
			// Unprivileged ICMP, as Docker and podman set it up for their
			// containers, so the ICMP check means the same everywhere.
			return os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0o644)
		})
		if err != nil {
			t.Fatalf("failed to configure namespace %d: %v", i, err)
		}
		members = append(members, m)
	}
	t.Cleanup(func() {
		_ = host.Do(func(ns.NetNS) error {
			if l, err := netlink.LinkByName(br); err == nil {
				_ = netlink.LinkDel(l)
			}
			return nil
		})
	})
	return members
}

// regServeTCP listens on port in n (all addresses, both families) until
// the test ends: the neighbour's service.
func regServeTCP(t *testing.T, n ns.NetNS, port int) {
	t.Helper()
	var ln net.Listener
	if err := n.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// regChains lists the SFORGE chains in a namespace, both backends and
// families.
func regChains(t *testing.T, n ns.NetNS) string {
	t.Helper()
	var b strings.Builder
	_ = n.Do(func(ns.NetNS) error {
		for _, save := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
			out, _ := exec.Command(save).Output()
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "SFORGE") {
					b.WriteString(save + ": " + l + "\n")
				}
			}
		}
		return nil
	})
	return b.String()
}

// userCredential is the credential of the user called name, to run a
// command as.
func userCredential(t *testing.T, name string) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup(name)
	testenv.Require(t, err == nil, "no user "+name)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// userPrefix copies the binaries of prefix/bin where the user called name
// can run them (the module may sit under root's home, and runc runs a
// rootless engine's hooks and runtime as that user) and makes a log
// directory of the user's. It returns the new prefix and that directory.
func userPrefix(t *testing.T, prefix, name string) (newPrefix, logDir string) {
	t.Helper()
	u, err := user.Lookup(name)
	testenv.Require(t, err == nil, "no user "+name)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	base := t.TempDir()
	newPrefix, logDir = filepath.Join(base, "prefix"), filepath.Join(base, "log")
	for _, d := range []string{filepath.Join(newPrefix, "bin"), logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"sforge", "sforge-runtime", "sforge-hook", "sforge-probe"} {
		copyFile(t, filepath.Join(prefix, "bin", b), filepath.Join(newPrefix, "bin", b))
	}
	if err := os.Chown(logDir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := testenv.SearchableAbove(logDir); err != nil {
		t.Fatal(err)
	}
	return newPrefix, logDir
}
