package front

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/internal/testenv"
)

// The front runs in every binary that links it: only sforge-runtime may.
func TestOnlySforgeRuntimeLinksTheFront(t *testing.T) {
	goBin := testenv.RequireBinary(t, "go")
	const front = "github.com/sforge-dev/netiso/shim/front"
	out, err := exec.Command(goBin, "list", "-deps", "-test=false", "-f", `{{if eq .Name "main"}}{{.ImportPath}} {{join .Deps " "}}{{end}}`, "github.com/sforge-dev/netiso/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	linked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, " ")
		if !strings.Contains(" "+deps+" ", " "+front+" ") {
			continue
		}
		if pkg != "github.com/sforge-dev/netiso/cmd/sforge-runtime" {
			t.Errorf("%s links %s: its constructor would exec runc there", pkg, front)
		}
		linked++
	}
	if linked != 1 {
		t.Errorf("%d commands link the front, want sforge-runtime alone", linked)
	}
}

// Without cgo the package is empty: the shim works, without its fast path,
// and the C readers go untested. CI must build it.
func TestBuiltWithCgo(t *testing.T) {
	testenv.Require(t, Built, "built without cgo (CGO_ENABLED=0 or no C compiler): the pass-through front is not compiled in")
}
