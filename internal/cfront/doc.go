// Package cfront is the C the pre-runtime fronts share (shim/front for
// sforge-runtime, hook/front for sforge-hook): reading a small file, the
// process's command line, and the checks both make the way the Go code
// makes them. It is a header of static functions, cfront.h; a front
// includes it (#cgo CFLAGS: -I${SRCDIR}/../../internal/cfront) and imports
// this package, which is what makes the go command rebuild the front when
// the header changes (it hashes a package's own .h files, not the ones it
// includes from elsewhere).
package cfront
