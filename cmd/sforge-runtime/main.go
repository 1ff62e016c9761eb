// Command sforge-runtime wraps runc: for a container that asks for network
// isolation it installs the rules in the container's network namespace
// before the container's process can run; everything else is exec'd
// straight to runc. A C front (package shim/front) does most of it before
// the Go runtime starts: the pass-through execs, and the isolated create of
// a container with a namespace of its own. See package shim.
package main

import (
	"os"

	"github.com/sforge-dev/netiso/shim"
	"github.com/sforge-dev/netiso/shim/front"
)

// front.Created: the front ran `runc create` and left the rest to the
// shim; front.Left: why it left an isolated create to the shim.
func main() {
	os.Exit(shim.Main(os.Args[1:], shim.FrontReport{Created: front.Created(), Left: front.Left()}))
}
