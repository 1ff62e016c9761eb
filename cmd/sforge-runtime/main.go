// Command sforge-runtime wraps runc: for a container that asks for network
// isolation it installs the rules in the container's network namespace
// before runc creates the container; everything else is exec'd straight to
// runc, most of it by a C front before the Go runtime starts (package
// shim/front). See package shim.
package main

import (
	"os"

	"github.com/sforge-dev/netiso/shim"
	_ "github.com/sforge-dev/netiso/shim/front"
)

func main() { os.Exit(shim.Main(os.Args[1:])) }
