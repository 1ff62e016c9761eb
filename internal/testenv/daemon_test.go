package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestExited: a process that has exited is seen as such and is still
// there for StopDaemon to reap; a running one is not.
func TestExited(t *testing.T) {
	running := exec.Command("sleep", "30")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	defer StopDaemon(t, "sleep", running, 5*time.Second)
	if Exited(running) {
		t.Fatal("a running process reported as exited")
	}
	gone := exec.Command("sh", "-c", "exit 3")
	if err := gone.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !Exited(gone) {
		if time.Now().After(deadline) {
			t.Fatal("an exited process not reported within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// WNOWAIT left it to be reaped, with its status.
	if err := gone.Wait(); err == nil || gone.ProcessState.ExitCode() != 3 {
		t.Fatalf("Wait after Exited: %v, exit code %d, want 3", err, gone.ProcessState.ExitCode())
	}
}

// RemoveNewCgroups removes the empty cgroups it did not find, deepest
// first, and leaves those that were there before.
func TestRemoveNewCgroups(t *testing.T) {
	RequireRoot(t)
	hs := cgroupHierarchies()
	if len(hs) == 0 {
		t.Fatal("no cgroup hierarchy mounted")
	}
	name := fmt.Sprintf("sforge-testenv-%d", os.Getpid())
	old := "sforge-testenv-old-" + strconv.Itoa(os.Getpid())
	if err := os.Mkdir(filepath.Join(hs[0], old), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Rmdir(filepath.Join(hs[0], old)) }()
	t.Run("inner", func(t *testing.T) {
		RemoveNewCgroups(t, name)
		RemoveNewCgroups(t, old)
		for _, h := range hs {
			if err := os.MkdirAll(filepath.Join(h, name, "child"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	})
	for _, h := range hs {
		if _, err := os.Lstat(filepath.Join(h, name)); err == nil {
			t.Errorf("%s left", filepath.Join(h, name))
		}
	}
	if _, err := os.Lstat(filepath.Join(hs[0], old)); err != nil {
		t.Errorf("a cgroup that was there before went: %v", err)
	}
}
