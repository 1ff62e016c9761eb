package testenv

import (
	"os/exec"
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
