package testenv

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Exited tells whether a daemon the test started has exited, leaving it
// to be reaped (WNOWAIT) by StopDaemon: a readiness wait ends at once for
// a daemon that refused its settings. (cmd.ProcessState stays nil until
// something calls Wait.)
func Exited(cmd *exec.Cmd) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo != 0
}

// StopDaemon stops a daemon the test started, by its PID: SIGTERM, then
// SIGKILL when it has not exited within grace. It returns once the process
// has been reaped.
func StopDaemon(t testing.TB, name string, cmd *exec.Cmd, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		t.Logf("%s (pid %d) did not stop in %s; killing it", name, cmd.Process.Pid, grace)
		_ = cmd.Process.Kill()
		<-done
	}
}

// UnmountBelow lazily unmounts every mount point under dir (overlay layers,
// netns bind mounts, shm a daemon left), deepest first, so that dir can be
// removed.
func UnmountBelow(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}
