// Command sforge-hook is the OCI hook that confines a container's egress to
// its allowlist: `sforge-hook createRuntime|prestart|poststop`, the OCI
// state on stdin. See package hook; a C front (package hook/front) runs
// before the Go runtime starts and installs the rules of a createRuntime,
// or ends a poststop with nothing to do, when it is sure of the case.
package main

import (
	"os"
	"runtime"

	"github.com/sforge-dev/netiso/hook"
	"github.com/sforge-dev/netiso/hook/front"
)

func main() {
	// The install does one thing at a time: with a single P the runtime
	// keeps no second thread spinning for work whenever a goroutine wakes,
	// CPU the install needs on a busy host (1.54 ms instead of 1.83 here).
	// Only when there is an install: changing it stops the world, which a
	// hook with nothing to do need not pay.
	hook.BeforeInstall = func() { runtime.GOMAXPROCS(1) }
	hook.FrontLeft = front.Left
	os.Exit(hook.Main(os.Args, os.Stdin, os.Stderr, os.Getenv))
}
