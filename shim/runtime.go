package shim

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Runtime is the low-level OCI runtime the shim hands the command line to.
type Runtime interface {
	// Exec replaces the shim's process with the runtime: the engine that
	// called us then talks to runc directly (same pid, stdio, fds). It
	// does not return on success.
	Exec(args []string) error
	// Run runs the runtime as the shim's child, as if it had been exec'd:
	// same stdio, every descriptor the shim inherited, same environment
	// and working directory. It returns the runtime's exit status (128+n
	// for a signal n); the error is for a runtime that could not be
	// started or waited for.
	Run(args []string) (int, error)
}

// execRuntime runs the runtime binary at path.
type execRuntime struct {
	path string
}

var _ Runtime = execRuntime{}

// NewExecRuntime returns the Runtime that runs the binary at path.
func NewExecRuntime(path string) Runtime { return execRuntime{path: path} }

func (r execRuntime) Exec(args []string) error {
	argv := append([]string{r.path}, args...)
	if err := syscall.Exec(r.path, argv, os.Environ()); err != nil {
		return fmt.Errorf("failed to exec %s: %w", r.path, err)
	}
	return nil
}

// Run forks and execs the runtime. Descriptors 0-2 are passed as they
// are (a closed one stays closed); every other descriptor the shim
// inherited stays open across the exec as well, because Go neither marks
// inherited descriptors close-on-exec nor closes them when it starts a
// child: that is how `--preserve-fds N` and socket-activation descriptors
// reach runc unchanged. The shim's own descriptors are all close-on-exec.
//
// The child gets SIGKILL when the shim dies: whoever kills the shim (a
// containerd timeout, say) kills runc with it, as it would have killed
// runc itself had the shim exec'd.
func (r execRuntime) Run(args []string) (int, error) {
	// The parent-death signal fires when the forking thread exits: keep
	// this goroutine on its thread until the child is waited for.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	files := make([]uintptr, 3)
	for fd := range files {
		files[fd] = uintptr(fd)
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			files[fd] = ^uintptr(0) // closed: stays closed in the child
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return 0, fmt.Errorf("failed to read the working directory: %w", err)
	}
	argv := append([]string{r.path}, args...)
	pid, err := syscall.ForkExec(r.path, argv, &syscall.ProcAttr{
		Dir:   wd,
		Env:   os.Environ(),
		Files: files,
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, fmt.Errorf("failed to start %s: %w", r.path, err)
	}
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("failed to wait for %s: %w", r.path, err)
	}
	switch {
	case ws.Exited():
		return ws.ExitStatus(), nil
	case ws.Signaled():
		return 128 + int(ws.Signal()), nil
	}
	return 0, fmt.Errorf("%s ended in an unexpected state %#x", r.path, uint32(ws))
}
