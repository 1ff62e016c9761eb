// Command sforge-runtime wraps runc: for a container that asks for network
// isolation it runs runc create as its child and installs the rules in the
// new container's network namespace before returning; everything else is
// exec'd straight to runc. See package shim.
package main

import (
	"os"

	"github.com/sforge-dev/netiso/shim"
)

func main() { os.Exit(shim.Main(os.Args[1:])) }
