// Command sforge-runtime wraps runc: for a container that asks for network
// isolation it installs the rules in the container's network namespace
// before the container's process can run; everything else is exec'd
// straight to runc. See package shim.
package main

import (
	"os"

	"github.com/sforge-dev/netiso/shim"
)

func main() {
	os.Exit(shim.Main(os.Args[1:]))
}
