package integration

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/internal/testenv"
)

// TestK8sImportsStayOut: client-go and the Kubernetes API types are large
// and slow to initialise; the hook and the runtime shim sit on every
// container start, and policy/engine are linked by both. None of them may
// depend on k8s.io (nor on the YAML or cobra stacks that come with it).
func TestK8sImportsStayOut(t *testing.T) {
	goBin := testenv.RequireBinary(t, "go")
	const mod = "github.com/sforge-dev/netiso/"
	pkgs := []string{mod + "cmd/sforge-hook", mod + "cmd/sforge-runtime", mod + "policy/...", mod + "engine/...", mod + "hook/..."}
	out, err := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var bad []string
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") ||
			strings.HasPrefix(dep, "github.com/spf13/cobra") || strings.HasPrefix(dep, mod+"k8s/") {
			bad = append(bad, dep)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%v depend on %v", pkgs, bad)
	}
}
