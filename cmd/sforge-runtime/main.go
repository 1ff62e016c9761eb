// Command sforge-runtime wraps runc: it adds the sforge hooks to the spec of
// containers that ask for network isolation, then execs runc. See package
// shim.
package main

import (
	"os"

	"github.com/sforge-dev/netiso/shim"
)

func main() { os.Exit(shim.Main(os.Args[1:])) }
