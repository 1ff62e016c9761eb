// Command exec-wrapper is the lifecycle benchmark's floor for a runtime
// wrapper written in Go: it execs the runtime named by $SFORGE_BENCH_RUNC
// with its own arguments and does nothing else. What sforge-runtime costs
// on top of it is its own work; what this costs is a Go process's start.
package main

import (
	"fmt"
	"os"
	"syscall"
)

func main() {
	runc := os.Getenv("SFORGE_BENCH_RUNC")
	err := syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "exec-wrapper:", err)
	os.Exit(1)
}
