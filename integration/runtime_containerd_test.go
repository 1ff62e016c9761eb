package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/audit"
	"github.com/sforge-dev/netiso/internal/testcontainerd"
	"github.com/sforge-dev/netiso/policy"
)

// containerdWithWorld is a private containerd with the world in its
// namespace, a LAN member for the containers' network (ctrNS) and a
// neighbour serving TCP 9000 (nb); prefix holds the built binaries.
func containerdWithWorld(t *testing.T) (prefix string, d *testcontainerd.Daemon, ctrNS, nb regLANMember) {
	t.Helper()
	prefix = regBinaries(t)
	regHostGuard(t)
	d = testcontainerd.Start(t)
	regWorld(t, d.NetNS)
	lan := regLAN(t, d.NetNS, 2)
	ctrNS, nb = lan[0], lan[1]
	regServeTCP(t, nb.NS, 9000)
	return prefix, d, ctrNS, nb
}

// TestRuntimeContainerd is the containerd acceptance: a private containerd
// and `ctr run --runc-binary <sforge-runtime>` (the BinaryName `sforge
// install --containerd` registers) with the allowlist annotation, in a
// network namespace the test wired to a bridge with a neighbour. The
// container is isolated like the Docker case; the shim's poststop hook
// removes the rules from the namespace, which outlives the container, so a
// container started there afterwards without the annotation reaches
// everything. Both containers, the one in the namespace by path and one
// with a namespace of its own, are isolated by sforge-runtime (its log says
// so). A malformed annotation,
// NET_ADMIN, --privileged and --net-host each fail `ctr run` before the
// process runs.
func TestRuntimeContainerd(t *testing.T) {
	prefix, d, ctrNS, nb := containerdWithWorld(t)
	rootfs := regRootfs(t, prefix)
	shim := filepath.Join(prefix, "bin", "sforge-runtime")

	// The registration itself: install into a config.toml, then check
	// that containerd reads runtime sforge from it.
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("version = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := regSforge(t, prefix, nil, "install", "--containerd", "--containerd-config", cfg, "--prefix", prefix); err != nil || !strings.Contains(out, "restart containerd") {
		t.Fatalf("sforge install --containerd: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dump, err := d.CommandOutput(ctx, "containerd", "--config", cfg, "config", "dump")
	if err != nil || !strings.Contains(dump, `BinaryName = "`+shim+`"`) || !strings.Contains(dump, `pod_annotations = ["sforge.io/*"]`) {
		t.Fatalf("containerd does not read runtime sforge from the installed config: %v\n%s", err, dump)
	}

	checks, open := regRuntimeChecks(nb.IPv4, nb.IPv6)
	script := "/sforge-probe " + strings.Join(regProbeArgs(checks), " ") + "; grep -E '^Cap(Eff|Bnd)' /proc/self/status"
	n := 0
	run := func(t *testing.T, flags []string, command ...string) (string, error) {
		t.Helper()
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		args := append([]string{"run", "--rm", "--rootfs", "--runc-binary", shim}, flags...)
		args = append(append(args, rootfs, fmt.Sprintf("sf%d", n)), command...)
		return d.Ctr(ctx, args...)
	}
	withNS := "network:" + ctrNS.NS.Path()
	// The report goes to a file in a bind mount: ctr can lose the stdout of
	// a process that exits within milliseconds (its FIFO copy races the
	// task's deletion), a file cannot be lost.
	report := func(t *testing.T, flags []string) string {
		t.Helper()
		dir := t.TempDir()
		flags = append([]string{"--mount", "type=bind,src=" + dir + ",dst=/m,options=rbind:rw"}, flags...)
		out, err := run(t, flags, "/bin/sh", "-c", "("+script+") >/m/report 2>&1")
		if err != nil {
			t.Fatalf("ctr run: %v\n%s", err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "report"))
		if err != nil {
			t.Fatalf("no report from the container: %v\n%s", err, out)
		}
		return string(b)
	}

	// A namespace by path: the runtime adds sforge-hook at createRuntime
	// and poststop.
	t.Run("isolated", func(t *testing.T) {
		before := isolatedCreates(t, dropped)
		out := report(t, []string{"--with-ns", withNS, "--annotation", policy.AnnotationAssignment(regAllowlist)})
		if n := isolatedCreates(t, dropped); n != before+1 {
			t.Errorf("the runtime logged %d isolated creates for one ctr run, want 1; shim log:\n%s", n-before, shimLog(t))
		}
		regExpect(t, out, checks)
		if capBit(t, out, "CapBnd", capNetRaw) {
			t.Errorf("NET_RAW held:\n%s", out)
		}
		if left := regChains(t, ctrNS.NS); left != "" {
			t.Errorf("poststop left rules in the namespace, which outlives the container:\n%s", left)
		}
	})
	// The poststop hook records what the rules refused.
	t.Run("audit", func(t *testing.T) {
		args := append([]string{"--with-ns", withNS, "--annotation", policy.AnnotationAssignment(auditAllowlist)}, "/sforge-probe", "--timeout", "1s")
		out, _ := run(t, args[:4], append(args[4:], auditProbe...)...)
		t.Logf("probe:\n%s", out)
		checkAudit(t, auditRecord(t, os.Getenv(audit.Env), fmt.Sprintf("sf%d", n)), auditAllowlist)
	})
	// A namespace of its own (ctr wires no network into it): containerd's
	// runc shim runs sforge-runtime's create as it runs runc's, and the
	// runtime makes the namespace with its rules before runc runs.
	t.Run("own namespace", func(t *testing.T) {
		before := isolatedCreates(t, "isolated before start (netns=made-by-sforge")
		out := report(t, []string{"--annotation", policy.AnnotationAssignment(regAllowlist)})
		if !strings.Contains(out, `"check":"loopback","target":"127.0.0.1","ok":true`) || capBit(t, out, "CapBnd", capNetRaw) {
			t.Errorf("report:\n%s", out)
		}
		if n := isolatedCreates(t, "isolated before start (netns=made-by-sforge"); n != before+1 {
			t.Errorf("the runtime logged %d isolated creates in a namespace of its making for one ctr run, want 1; shim log:\n%s", n-before, shimLog(t))
		}
	})
	t.Run("afterwards without annotation", func(t *testing.T) {
		out := report(t, []string{"--with-ns", withNS})
		regExpect(t, out, open)
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed annotation", []string{"--with-ns", withNS, "--annotation", policy.AnnotationAssignment("v1;tcp:nope")}, "invalid sforge.io/egress value"},
		{"NET_ADMIN", []string{"--with-ns", withNS, "--annotation", policy.AnnotationAssignment(regAllowlist), "--cap-add", "CAP_NET_ADMIN"}, "CAP_NET_ADMIN"},
		{"privileged", []string{"--with-ns", withNS, "--annotation", policy.AnnotationAssignment(regAllowlist), "--privileged"}, "refused"},
		{"host network", []string{"--net-host", "--annotation", policy.AnnotationAssignment(regAllowlist)}, "host's network namespace"},
	} {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			markers := t.TempDir()
			args := append([]string{"--mount", "type=bind,src=" + markers + ",dst=/m,options=rbind:rw"}, tc.args...)
			out, err := run(t, args, "/bin/touch", "/m/ran")
			if err == nil {
				t.Fatalf("ctr run succeeded; it must fail:\n%s", out)
			}
			if !strings.Contains(out, "sforge") || !strings.Contains(out, tc.want) {
				t.Errorf("ctr run failed without our message (%q):\n%s", tc.want, out)
			}
			regMustNotExist(t, filepath.Join(markers, "ran"), tc.name)
			t.Logf("ctr run refused as expected:\n%s", out)
		})
	}
}
