//go:build cgo

package front

// #include <stdlib.h>
// #include "front.h"
import "C"

import "unsafe"

// The C readers, callable from front_test.go (test files cannot use cgo).
// Unused in sforge-hook: the linker drops them.

// args reports whether the front reads args (after the program name) as a
// poststop it may end.
func args(a []string) bool {
	if len(a) == 0 {
		return C.sforge_hook_front_args(0, nil) != 0
	}
	cargs := make([]*C.char, len(a)+1)
	for i, s := range a {
		cargs[i] = C.CString(s)
	}
	defer func() {
		for _, p := range cargs[:len(a)] {
			C.free(unsafe.Pointer(p))
		}
	}()
	return C.sforge_hook_front_args(C.int(len(a)), &cargs[0]) != 0
}

// cBytes copies b into C memory (one byte more, so that an empty b is not
// a nil pointer).
func cBytes(b []byte) (*C.char, func()) {
	p := C.malloc(C.size_t(len(b) + 1))
	copy(unsafe.Slice((*byte)(p), len(b)+1), b)
	return (*C.char)(p), func() { C.free(p) }
}

// state runs the C reader of the OCI state; ok false means "not sure".
func state(b []byte) (bundle string, ok bool) {
	buf, free := cBytes(b)
	defer free()
	var out [4096]C.char
	if C.sforge_hook_front_state(buf, C.size_t(len(b)), &out[0], C.size_t(len(out))) == 0 {
		return "", false
	}
	return C.GoString(&out[0]), true
}

// spec runs the C reader of a config.json: whether it has a network
// namespace, and its path; ok false means "not sure".
func spec(b []byte) (net bool, path string, ok bool) {
	buf, free := cBytes(b)
	defer free()
	var out [4096]C.char
	var n C.int
	if C.sforge_hook_front_spec(buf, C.size_t(len(b)), &n, &out[0], C.size_t(len(out))) == 0 {
		return false, "", false
	}
	return n != 0, C.GoString(&out[0]), true
}

// idle runs the front's whole decision on a state (the bundle's config.json
// and the namespace path read from the file system).
func idle(b []byte) bool {
	buf, free := cBytes(b)
	defer free()
	return C.sforge_hook_front_idle(buf, C.size_t(len(b))) != 0
}
