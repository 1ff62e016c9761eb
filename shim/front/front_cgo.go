//go:build cgo

package front

// #include "front.h"
import "C"

// Built reports whether the front is compiled in (cgo builds).
const Built = true
