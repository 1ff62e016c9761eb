package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// RequireLinkedOnlyBy fails t unless main is the one command of the module
// that links pkg: a package whose C constructor runs in whatever binary
// links it (the fronts) must reach no other.
func RequireLinkedOnlyBy(t *testing.T, pkg, main string) {
	t.Helper()
	goBin := RequireBinary(t, "go")
	out, err := exec.Command(goBin, "list", "-deps", "-test=false", "-f", `{{if eq .Name "main"}}{{.ImportPath}} {{join .Deps " "}}{{end}}`, "github.com/sforge-dev/netiso/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var linking []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		cmd, deps, _ := strings.Cut(line, " ")
		if strings.Contains(" "+deps+" ", " "+pkg+" ") {
			linking = append(linking, cmd)
		}
	}
	if len(linking) != 1 || linking[0] != main {
		t.Errorf("%s is linked by %q, want %s alone: its constructor runs in every binary that links it", pkg, linking, main)
	}
}
