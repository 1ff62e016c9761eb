// Command sforge-hook is the OCI hook that confines a container's egress to
// its allowlist: `sforge-hook createRuntime|prestart|poststop`, the OCI
// state on stdin. See package hook.
package main

import (
	"os"

	"github.com/sforge-dev/netiso/hook"
)

func main() {
	os.Exit(hook.Main(os.Args, os.Stdin, os.Stderr, os.Getenv))
}
