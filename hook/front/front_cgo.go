//go:build cgo

package front

// #cgo CFLAGS: -I${SRCDIR}/../../internal/cfront
// #include "front.h"
import "C"

// The C both fronts share: importing it rebuilds this one when it changes.
import _ "github.com/sforge-dev/netiso/internal/cfront"

// Built reports whether the front is compiled in (cgo builds).
const Built = true

// Left is why the front left a createRuntime's install to the Go hook,
// "" when it made no such decision.
func Left() string {
	if C.sforge_hook_front_left == nil {
		return ""
	}
	return C.GoString(C.sforge_hook_front_left)
}
