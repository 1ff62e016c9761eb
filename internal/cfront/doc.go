// Package cfront is the C the pre-runtime fronts share (shim/front for
// sforge-runtime, hook/front for sforge-hook): reading a small file, the
// process's command line, and the checks both make the way the Go code
// makes them. It is headers of static functions (cfront.h; spec.h, the OCI
// state and config.json; allow.h, the allowlist and the table name; nft.h,
// the nftables engine); a front
// includes them (#cgo CFLAGS: -I${SRCDIR}/../../internal/cfront) and
// imports this package, which embeds the headers (headers.go): that is
// what makes the go command rebuild the front when a header changes.
package cfront
