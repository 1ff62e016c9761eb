//go:build !cgo

package front

// Built reports whether the front is compiled in (cgo builds).
const Built = false
