package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/internal/testdocker"
)

// TestPrivateDockerd proves the harness: a private dockerd in its own
// namespace runs a container from an imported scratch image, and its
// bridge stays out of the host's namespace.
func TestPrivateDockerd(t *testing.T) {
	_, hostHadBridge := os.Stat("/sys/class/net/docker0")
	d := testdocker.Start(t, testdocker.Options{})
	rootfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	busybox := "/bin/busybox"
	b, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatalf("busybox-static needed: %v", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	d.ImportImage(t, "sforge-test/busybox:1", rootfs)
	out := d.MustDocker(t, "run", "--rm", "sforge-test/busybox:1", "/bin/busybox", "echo", "hello from scratch")
	if !strings.Contains(out, "hello from scratch") {
		t.Fatalf("unexpected output %q", out)
	}
	if _, err := os.Stat("/sys/class/net/docker0"); err == nil && hostHadBridge != nil {
		t.Fatal("dockerd created docker0 in the host's namespace; it must stay in its own")
	}
}
