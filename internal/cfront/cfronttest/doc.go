// Package cfronttest exposes the C of internal/cfront to Go tests, which
// cannot use cgo themselves: each function runs the C and returns what it
// computed, so that the tests can compare it with the Go code the C
// mirrors. Only tests import it.
package cfronttest
