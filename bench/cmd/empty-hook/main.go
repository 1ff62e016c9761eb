// Command empty-hook is the lifecycle benchmark's floor for an OCI hook
// written in Go: it reads the state runc writes to its stdin and exits. What
// sforge-hook costs on top of it is its own work; what this costs is a Go
// process's start, as runc runs a hook.
package main

import (
	"io"
	"os"
)

func main() { _, _ = io.Copy(io.Discard, os.Stdin) }
