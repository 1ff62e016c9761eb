package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The shim sits on every container start: it must stay a small static
// binary without the CLI's heavy dependencies.
func TestLeanDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go list unavailable: %v\n%s", err, out)
	}
	heavy := regexp.MustCompile(`k8s\.io|docker|moby|cobra|grpc|protobuf|opentelemetry|go-toml`)
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		if heavy.MatchString(p) {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("sforge-runtime depends on %v", bad)
	}
}
