package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sforge-dev/netiso/engine"
	nftengine "github.com/sforge-dev/netiso/engine/nftables"
	"github.com/sforge-dev/netiso/internal/testdocker"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/internal/testnet"
	"github.com/sforge-dev/netiso/policy"
)

// TestNftablesEngineWithDocker installs the nftables engine's table in the
// namespace of a real Docker container on a user-defined network, where
// dockerd has put its embedded-DNS NAT with iptables-nft or with
// iptables-legacy (chosen by the iptables on dockerd's PATH). From inside
// the container: the allowed port on the network's gateway answers, the
// other does not, and Docker's embedded resolver answers only when
// 127.0.0.11 is allowed as DNS.
func TestNftablesEngineWithDocker(t *testing.T) {
	testenv.RequireRoot(t)
	for _, variant := range iptablesVariants {
		t.Run(variant, func(t *testing.T) {
			for _, f := range []policy.Family{policy.IPv4, policy.IPv6} {
				testenv.RequireBinary(t, listBinary(f, variant))
				testenv.RequireBinary(t, restoreBinary(f, variant))
			}
			// dockerd runs `iptables` from its PATH: point it at one backend.
			bin := t.TempDir()
			for _, name := range []string{"iptables", "ip6tables"} {
				for _, suffix := range []string{"", "-save", "-restore"} {
					target, err := exec.LookPath(name + "-" + variant + suffix)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink(target, filepath.Join(bin, name+suffix)); err != nil {
						t.Fatal(err)
					}
				}
			}
			t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			testDockerContainer(t, variant)
		})
	}
}

func testDockerContainer(t *testing.T, variant string) {
	busybox, err := os.ReadFile("/bin/busybox")
	testenv.Require(t, err == nil, "busybox-static needed at /bin/busybox")
	d := testdocker.Start(t, testdocker.Options{})
	rootfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), busybox, 0o755); err != nil {
		t.Fatal(err)
	}
	const image = "sforge-test/busybox:1"
	d.ImportImage(t, image, rootfs)
	d.MustDocker(t, "network", "create", "sfnet")
	gw := strings.TrimSpace(d.MustDocker(t, "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", "sfnet"))
	// The gateway address lives in dockerd's namespace: serve there.
	testnet.ServeTCP(t, d.NetNS, fmt.Sprintf(":%d", testnet.AllowedPort))
	testnet.ServeTCP(t, d.NetNS, fmt.Sprintf(":%d", testnet.OtherPort))

	id := strings.TrimSpace(d.MustDocker(t, "run", "-d", "--name", "sfc", "--network", "sfnet", "--cap-drop", "NET_RAW",
		image, "/bin/busybox", "sleep", "600"))
	pid := strings.TrimSpace(d.MustDocker(t, "inspect", "-f", "{{.State.Pid}}", id))
	netns := "/proc/" + pid + "/ns/net"

	// Docker's NAT for 127.0.0.11 is there, in the backend under test.
	nat, err := runInPath(netns, listBinary(policy.IPv4, variant)+"-save", "-t", "nat")
	if err != nil || !strings.Contains(nat, "DOCKER_OUTPUT") || !strings.Contains(nat, "127.0.0.11") {
		t.Fatalf("no Docker embedded-DNS NAT in iptables-%s in the container: %v\n%s", variant, err, nat)
	}

	inCtr := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return d.Docker(ctx, append([]string{"exec", id, "/bin/busybox"}, args...)...)
	}
	reach := func(port int) bool {
		out, err := inCtr("nc", "-w", "2", gw, fmt.Sprint(port))
		return err == nil && strings.Contains(out, testnet.Banner)
	}
	resolves := func() bool {
		out, err := inCtr("nslookup", "sfc", "127.0.0.11")
		return err == nil && !strings.Contains(out, "can't") && strings.Contains(out, "Address")
	}
	// The harness: before any rule everything works.
	if !reach(testnet.AllowedPort) || !reach(testnet.OtherPort) || !resolves() {
		t.Fatalf("harness: the container cannot reach %s or resolve through 127.0.0.11 before any rule", gw)
	}

	e := nftengine.New()
	tg := engine.Target{NetNS: netns, ID: id}
	mustInstall(t, e, tg, decode(t, fmt.Sprintf("v1;tcp:%s:%d", gw, testnet.AllowedPort)))
	if !reach(testnet.AllowedPort) {
		t.Error("allowed port unreachable")
	}
	if reach(testnet.OtherPort) {
		t.Error("other port reachable")
	}
	if resolves() {
		t.Error("Docker's embedded resolver answers although DNS is not allowed")
	}

	mustInstall(t, e, tg, decode(t, fmt.Sprintf("v1;tcp:%s:%d;dns:127.0.0.11", gw, testnet.AllowedPort)))
	if !resolves() {
		t.Error("Docker's embedded resolver does not answer although 127.0.0.11 is allowed")
	}
	if reach(testnet.OtherPort) {
		t.Error("other port reachable with DNS allowed")
	}

	if err := e.Remove(tg); err != nil {
		t.Fatal(err)
	}
	if !reach(testnet.OtherPort) {
		t.Error("other port still unreachable after remove")
	}
	d.MustDocker(t, "rm", "-f", id)
	// The container's namespace is gone with it: removal reports that.
	if err := e.Remove(tg); !errors.Is(err, engine.ErrNetNSGone) {
		t.Errorf("remove after the container's exit: %v, want ErrNetNSGone", err)
	}
}

// runInPath runs a command on a thread inside the namespace at path.
func runInPath(path string, name string, args ...string) (string, error) {
	n, err := ns.GetNS(path)
	if err != nil {
		return "", err
	}
	defer n.Close()
	return runIn(n, "", name, args...)
}
