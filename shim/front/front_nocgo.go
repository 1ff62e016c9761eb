//go:build !cgo

package front

// Built reports whether the front is compiled in (cgo builds).
const Built = false

// Created is false: without the front, the Go shim does every create.
func Created() bool { return false }

// Left is "": without the front, nothing was left to the Go shim.
func Left() string { return "" }
