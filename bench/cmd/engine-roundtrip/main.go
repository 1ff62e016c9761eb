// Command engine-roundtrip is the whole-process benchmark subject: one
// process that enters a network namespace, installs an allowlist with a
// rule engine and removes it again. With -mode=install it only installs,
// as the hook at container creation does (a private namespace needs no
// removal: the rules die with it). With -mode=start it returns before
// touching anything, to measure what the binary costs just to start.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"

	"github.com/sforge-dev/netiso/bench/internal/workload"
	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/policy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "engine-roundtrip:", err)
		os.Exit(1)
	}
}

func run() error {
	netns := flag.String("netns", "", "network namespace path")
	name := flag.String("engine", engines.Auto, "engine name")
	entries := flag.Int("entries", 4, "allowlist entries")
	mode := flag.String("mode", "roundtrip", "roundtrip, install or start")
	flag.Parse()
	switch *mode {
	case "start":
		return nil
	case "roundtrip", "install":
	default:
		return fmt.Errorf("unknown -mode %q (allowed: roundtrip, install, start)", *mode)
	}
	last, err := policy.HostEndpoint(netip.MustParseAddr("198.51.100.10"), policy.UDP, 7)
	if err != nil {
		return err
	}
	a, err := workload.Allowlist(*entries, last)
	if err != nil {
		return err
	}
	e, err := engines.New(*name)
	if err != nil {
		return err
	}
	t := engine.Target{NetNS: *netns, ID: "roundtrip"}
	if _, err := e.Install(t, a); err != nil {
		return err
	}
	if *mode == "install" {
		return nil
	}
	return e.Remove(t)
}
