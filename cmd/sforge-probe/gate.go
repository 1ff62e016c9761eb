package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// The gate: `sforge-probe gate --config-json JSON -- ARGV...` runs the
// hostile probe matrix as a container's first process, in the network
// namespace and with the capabilities the agent will have, and only when
// every verdict passes does it exec ARGV, the agent, in its place. Its
// lines go to stderr, each starting with GatePrefix: one per verdict, then
// "pass N" or "FAIL CHECK TARGET: got GOT". On a failure it exits with
// GateFailed and the agent never starts.

// GatePrefix starts each of the gate's lines.
const GatePrefix = "sforge-gate "

// GateFailed is the gate's exit status when a verdict failed.
const GateFailed = 3

func runGate(args []string, stderr io.Writer) int {
	var raw []byte
	for len(args) > 0 && args[0] != "--" {
		switch {
		case args[0] == "--config-json" && len(args) > 1:
			raw, args = []byte(args[1]), args[2:]
		default:
			fmt.Fprintf(stderr, "%susage: sforge-probe gate --config-json JSON -- ARGV... (unexpected %q)\n", GatePrefix, args[0])
			return 2
		}
	}
	if len(args) < 2 {
		fmt.Fprintf(stderr, "%susage: sforge-probe gate --config-json JSON -- ARGV...: no command after --\n", GatePrefix)
		return 2
	}
	argv := args[1:]
	cfg, err := parseMatrixConfig(raw)
	if err != nil {
		fmt.Fprintf(stderr, "%s%v\n", GatePrefix, err)
		return 2
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		// Found out before the matrix runs: a run that cannot start its
		// agent needs no verdicts.
		fmt.Fprintf(stderr, "%scannot start the agent: %v\n", GatePrefix, err)
		return 127
	}
	verdicts := matrixVerdicts(cfg)
	var failed *Verdict
	for i, v := range verdicts {
		b, _ := json.Marshal(v)
		fmt.Fprintf(stderr, "%s%s\n", GatePrefix, b)
		if !v.Pass && failed == nil {
			failed = &verdicts[i]
		}
	}
	if failed != nil {
		fmt.Fprintf(stderr, "%sFAIL %s %s: got %s, want %s\n", GatePrefix, failed.Check, failed.Target, failed.Got, failed.Expect)
		return GateFailed
	}
	fmt.Fprintf(stderr, "%spass %d\n", GatePrefix, len(verdicts))
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(stderr, "%scannot start the agent: %v\n", GatePrefix, err)
	return 127
}
