package front

import (
	"testing"

	"github.com/sforge-dev/netiso/internal/testenv"
)

// The front runs in every binary that links it: only sforge-hook may.
func TestOnlySforgeHookLinksTheFront(t *testing.T) {
	testenv.RequireLinkedOnlyBy(t, "github.com/sforge-dev/netiso/hook/front", "github.com/sforge-dev/netiso/cmd/sforge-hook")
}

// Without cgo the package is empty: the hook works, without its fast path,
// and the C readers go untested. CI must build it.
func TestBuiltWithCgo(t *testing.T) {
	testenv.Require(t, Built, "built without cgo (CGO_ENABLED=0 or no C compiler): the hook front is not compiled in")
}
