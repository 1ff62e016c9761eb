package shim

import (
	"fmt"
	"os"
	"syscall"
)

// Runtime is the low-level OCI runtime the shim hands the command line to.
// Exec does not return on success. The performance work (issue 9) adds a
// second implementation that runs `create` as a child and installs the
// rules itself before returning; everything else stays an Exec.
type Runtime interface {
	Exec(args []string) error
}

// execRuntime replaces the shim's process with the runtime: the engine
// that called us then talks to runc directly (same pid, stdio, fds).
type execRuntime struct {
	path string
}

var _ Runtime = execRuntime{}

// NewExecRuntime returns the Runtime that execs the binary at path.
func NewExecRuntime(path string) Runtime { return execRuntime{path: path} }

func (r execRuntime) Exec(args []string) error {
	argv := append([]string{r.path}, args...)
	if err := syscall.Exec(r.path, argv, os.Environ()); err != nil {
		return fmt.Errorf("failed to exec %s: %w", r.path, err)
	}
	return nil
}
