package front

import (
	"testing"

	"github.com/sforge-dev/netiso/internal/testenv"
)

// The front runs in every binary that links it: only sforge-runtime may.
func TestOnlySforgeRuntimeLinksTheFront(t *testing.T) {
	testenv.RequireLinkedOnlyBy(t, "github.com/sforge-dev/netiso/shim/front", "github.com/sforge-dev/netiso/cmd/sforge-runtime")
}

// Without cgo the package is empty: the shim works, without its fast path,
// and the C readers go untested. CI must build it.
func TestBuiltWithCgo(t *testing.T) {
	testenv.Require(t, Built, "built without cgo (CGO_ENABLED=0 or no C compiler): the pass-through front is not compiled in")
}
