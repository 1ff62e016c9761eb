// Command exec-true execs /bin/true at once: the cost of a static Go
// program's start, the floor under any runtime wrapper written in Go.
package main

import (
	"os"
	"syscall"
)

func main() {
	err := syscall.Exec("/bin/true", []string{"true"}, os.Environ())
	os.Stderr.WriteString("exec-true: " + err.Error() + "\n")
	os.Exit(1)
}
