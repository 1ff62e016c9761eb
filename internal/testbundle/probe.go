package testbundle

import (
	"encoding/json"
	"strings"
	"testing"
)

// ProbeResult is one line of sforge-probe output.
type ProbeResult struct {
	Check  string `json:"check"`
	Target string `json:"target"`
	OK     bool   `json:"ok"`
	Error  string `json:"error"`
}

// ParseProbe reads sforge-probe's JSON lines, keyed "check target".
func ParseProbe(t testing.TB, out string) map[string]ProbeResult {
	t.Helper()
	res := map[string]ProbeResult{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r ProbeResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("probe printed %q: %v", line, err)
		}
		res[r.Check+" "+r.Target] = r
	}
	return res
}
