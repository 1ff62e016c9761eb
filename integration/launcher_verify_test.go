package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/internal/testenv"
)

// TestLauncherVerify: `sforge run --verify` runs the hostile probe as the
// container's first process, in the network namespace and with the
// capabilities the agent gets, and starts the agent only when every
// verdict passed. Through a runtime that removes the container's IPv4
// rules behind sforge's back once it is created, the probe sees the
// judge's other port answer, and the run fails before the agent's first
// instruction.
func TestLauncherVerify(t *testing.T) {
	runtime := requireIsolationPieces(t)
	nsenter := testenv.RequireBinary(t, "nsenter")
	nft := testenv.RequireBinary(t, "nft")
	dir := t.TempDir()
	tamper := filepath.Join(dir, "tamper")
	// The runtime as registered, except that with the tamper file present
	// a create is followed by a flush of the container's IPv4 chain.
	wrapper := filepath.Join(dir, "tampering-runtime")
	script := fmt.Sprintf(`#!/bin/sh
case " $* " in *" create "*) ;; *) exec %[1]s "$@" ;; esac
%[1]s "$@" || exit $?
[ -e %[2]s ] || exit 0
pidfile=$(printf '%%s\n' "$@" | sed -n '/^--pid-file=/{s/^--pid-file=//;p}')
[ -n "$pidfile" ] || pidfile=$(printf '%%s\n' "$@" | sed -n '/^--pid-file$/{n;p}')
pid=$(cat "$pidfile")
table=$(%[3]s -t "$pid" -n %[4]s list tables | awk '/SFORGE_/ {print $3}')
%[3]s -t "$pid" -n %[4]s flush chain inet "$table" ipv4
`, runtime, tamper, nsenter, nft)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newLauncherEnv(t, map[string]any{"runtimes": map[string]any{"sforge": map[string]any{"path": wrapper}}})
	example := filepath.Join(repoRoot(t), "examples", "hello-judge")

	t.Run("verified, then the agent", func(t *testing.T) {
		report := filepath.Join(t.TempDir(), "report.json")
		code, out, errOut := e.run(t, nil, "--task", example, "--agent", "command", "--judge-url", e.judgeURL, "--verify", "--report", report)
		if code != 0 || !strings.Contains(out, "agent: done") || !strings.Contains(errOut, "sforge: verified: ") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if strings.Contains(errOut, "sforge-gate ") {
			t.Errorf("the gate's lines reached the agent's stderr:\n%s", errOut)
		}
		validateReportFile(t, report)
		rep := readReport(t, report)
		v, _ := rep["verify"].(map[string]any)
		verdicts, _ := v["verdicts"].([]any)
		if v == nil || v["passed"] != true || len(verdicts) < 10 {
			t.Errorf("report verify %v, want passed with the matrix's verdicts", rep["verify"])
		}
		e.requireNoContainers(t)
	})

	t.Run("a rule removed behind sforge's back", func(t *testing.T) {
		if err := os.WriteFile(tamper, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(tamper)
		report := filepath.Join(t.TempDir(), "report.json")
		code, out, errOut := e.run(t, nil, "--task", example, "--agent", "command", "--judge-url", e.judgeURL, "--verify", "--report", report,
			"--", "/bin/sh", "-c", "echo AGENT-RAN")
		if code != 123 || strings.Contains(out, "AGENT-RAN") {
			t.Fatalf("exit %d, want 123 without the agent starting\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		t.Logf("stderr:\n%s", errOut)
		// One line naming the check that got through.
		otherPort := strings.TrimSuffix(strings.TrimPrefix(e.judgeOtherPortURL, "http://"), "/")
		if !strings.Contains(errOut, "isolation verification failed in the workload before the agent started") || !strings.Contains(errOut, otherPort) {
			t.Errorf("stderr does not name the leak to %s:\n%s", otherPort, errOut)
		}
		validateReportFile(t, report)
		rep := readReport(t, report)
		if v, _ := rep["verify"].(map[string]any); v == nil || v["passed"] != false || !strings.Contains(fmt.Sprint(v["failure"]), "got reachable") {
			t.Errorf("report verify %v", rep["verify"])
		}
		e.requireNoContainers(t)
	})
}
