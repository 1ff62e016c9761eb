// Command sforge is the user-facing CLI: run, proxy, install, doctor,
// verify and policy.
package main

import (
	"os"

	"github.com/sforge-dev/netiso/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
