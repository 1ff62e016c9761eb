// Package front is sforge-runtime's pass-through front: a few lines of C
// that run as an ELF constructor, before the Go runtime starts, and exec
// the real runtime (runc) for the subcommands that cannot start a container
// (start, delete, kill, state, ...).
//
// Why C: sforge-runtime is on every runc invocation of every container,
// isolated or not, and a container's lifecycle is three or more of them.
// For all but create the Go shim has nothing to do but exec runc, yet it
// pays a Go process start first (runtime and heap set-up, its threads,
// package initialisers): about as much as the rest of its isolation work
// (BENCHMARKS.md, "The pass-through front"). runc does its own
// pre-runtime work the same way (libcontainer/nsenter).
//
// The front is an optimisation and nothing else: it execs only when it is
// sure that the Go shim would exec the same runtime with the same argv and
// environment (known global flags, a subcommand in its list, a settings
// file in the strict subset that `sforge install` writes, a runtime that is
// not sforge-runtime itself); in every other case it returns and the Go shim
// runs as before. front_test.go checks the C readers against the Go ones
// (also as fuzz targets), and the integration tests run the same command
// lines with and without it ($SFORGE_RUNTIME_NO_FRONT set turns it off).
//
// Only cmd/sforge-runtime may import this package: the constructor runs in
// whatever binary links it (a test checks that no other command does).
// Built without cgo (CGO_ENABLED=0) the package is empty and Built is
// false; the shim then works as before, only slower.
package front
