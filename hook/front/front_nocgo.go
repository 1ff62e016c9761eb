//go:build !cgo

package front

// Built reports whether the front is compiled in (cgo builds).
const Built = false

// Left is "": without the front, nothing was left to the Go hook.
func Left() string { return "" }
