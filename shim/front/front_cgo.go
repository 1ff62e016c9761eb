//go:build cgo

package front

// #cgo CFLAGS: -I${SRCDIR}/../../internal/cfront
// #include "front.h"
import "C"

// The C both fronts share: importing it rebuilds this one when it changes.
import _ "github.com/sforge-dev/netiso/internal/cfront"

// Built reports whether the front is compiled in (cgo builds).
const Built = true

// Created reports whether the front has run `runc create` for an isolated
// container and left the rest to the Go shim (see create.c): the shim must
// then install the rules in the created container, or delete it and fail,
// and must not run runc create again.
func Created() bool { return C.sforge_front_created != 0 }

// Left is why the front left an isolated create (or run) to the Go shim,
// "" when it made no such decision (nothing of sforge's, another
// command, or the front did it).
func Left() string {
	if C.sforge_front_left == nil {
		return ""
	}
	return C.GoString(C.sforge_front_left)
}
