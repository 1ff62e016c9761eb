// Package testcontainerd starts a private containerd for integration tests:
// its own config, root, state and socket under a temp dir, inside a network
// namespace the test created, stopped by PID. Tests drive it with ctr.
package testcontainerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sforge-dev/netiso/internal/testenv"
)

// Namespace is the containerd namespace the tests use.
const Namespace = "sforge-test"

// Daemon is a running private containerd.
type Daemon struct {
	Dir     string   // everything lives below it
	Address string   // gRPC socket
	Config  string   // config.toml
	NetNS   ns.NetNS // the namespace containerd (and its shims) run in
	cmd     *exec.Cmd
	logPath string
}

// Start launches containerd and waits (bounded) until ctr reaches it. It
// is stopped and its directory removed when the test ends.
func Start(t testing.TB) *Daemon { return StartEnv(t, nil) }

// StartEnv is Start with env added to containerd's environment, which its
// runc shims, and the runtimes they run, inherit.
func StartEnv(t testing.TB, env []string) *Daemon {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "containerd")
	testenv.RequireBinary(t, "containerd-shim-runc-v2")
	testenv.RequireBinary(t, "ctr")
	testenv.RequireBinary(t, "nsenter")
	// The cgroup of the namespace's containers, which containerd leaves.
	testenv.RemoveNewCgroups(t, Namespace)
	// Unix socket paths are limited to 108 bytes: keep the directory short.
	dir, err := os.MkdirTemp("", "sfc")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{
		Dir:     dir,
		Address: filepath.Join(dir, "containerd.sock"),
		Config:  filepath.Join(dir, "config.toml"),
		NetNS:   testenv.NewNetNS(t),
		logPath: filepath.Join(dir, "containerd.log"),
	}
	// The CRI plugin is off: ctr does not need it, and it would start CNI
	// and a stream server. Plugin dirs and the ttrpc/debug sockets stay
	// below dir so that parallel daemons never collide.
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), d.Address, filepath.Join(dir, "ttrpc.sock"))
	if err := os.WriteFile(d.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d.cmd = exec.Command("nsenter", "--net="+d.NetNS.Path(), "--", "containerd", "--config", d.Config)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if env != nil {
		d.cmd.Env = append(os.Environ(), env...)
	}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("failed to start containerd: %v", err)
	}
	t.Cleanup(func() { d.stop(t) })
	if err := d.waitReady(30 * time.Second); err != nil {
		t.Fatalf("containerd did not become ready: %v\n--- log (tail)\n%s", err, d.LogTail(40))
	}
	return d
}

func (d *Daemon) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if testenv.Exited(d.cmd) {
			return errors.New("containerd exited")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		out, err := d.Ctr(ctx, "version")
		cancel()
		if err == nil && strings.Contains(out, "Server:") {
			return nil
		}
		last = fmt.Errorf("%v: %s", err, strings.TrimSpace(out))
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %s: %v", timeout, last)
}

// PID is containerd's process id (nsenter execs it).
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Ctr runs ctr against this daemon in the test namespace and returns its
// combined output; it never fails the test by itself.
func (d *Daemon) Ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", d.Address, "--namespace", Namespace}, args...)...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

// LogTail returns the last n lines of containerd's log.
func (d *Daemon) LogTail(n int) string {
	b, _ := os.ReadFile(d.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stop kills leftover tasks, removes containers, then stops containerd by
// PID (SIGTERM, SIGKILL after a bound) and removes its directory.
func (d *Daemon) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := d.Ctr(ctx, "tasks", "ls", "-q"); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = d.Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id)
			_, _ = d.Ctr(ctx, "tasks", "delete", "-f", id)
		}
	}
	if out, err := d.Ctr(ctx, "containers", "ls", "-q"); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = d.Ctr(ctx, "containers", "delete", id)
		}
	}
	testenv.StopDaemon(t, "containerd", d.cmd, 20*time.Second)
	if t.Failed() {
		t.Logf("--- containerd log (tail)\n%s", d.LogTail(60))
	}
	testenv.UnmountBelow(d.Dir)
	_ = os.RemoveAll(d.Dir)
}

// CommandOutput runs a command (for example `containerd config dump`) in
// the daemon's network namespace and returns its combined output.
func (d *Daemon) CommandOutput(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + d.NetNS.Path(), "--", name}, args...)...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}
