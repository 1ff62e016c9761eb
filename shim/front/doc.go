// Package front is sforge-runtime's C front: C that runs as an ELF
// constructor, before the Go runtime starts, and does two things.
//
// It execs the real runtime (runc) for the subcommands that cannot start a
// container (start, delete, kill, state, ...) and for a create or run whose
// config.json mentions nothing of sforge's (front.c).
//
// And it does the isolated create of a container with a network namespace
// of its own (Docker's and containerd's default) or given by path (docker
// --network container:X), in a user namespace or not, the way the Go shim
// does it when it does not make the namespace (create.go,
// modeAfterCreate): CAP_NET_RAW dropped from
// config.json (and, for a namespace by path, the poststop hook that removes
// the rules added to it), `runc create` as its child, then the rules in the
// created container's namespace before it returns. The front does that with the C nftables engine
// (internal/cfront/nft.h) and exits 0 once the kernel's echo of the rules
// is checked (create.c). Before runc runs, anything it is not sure of goes to the Go
// shim; after, a container it could not isolate is handed to the Go shim
// (Created), which installs with the Go engine or deletes it and fails.
// The rules' plan and netlink batch are made before runc runs, so that
// between the container's creation and the rules' check only the exchange
// with the kernel runs (BENCHMARKS.md, "Ninth round").
//
// Why C: sforge-runtime is on every runc invocation of every container,
// isolated or not, and a container's lifecycle is three or more of them.
// For all but create the Go shim has nothing to do but exec runc, yet it
// pays a Go process start first (runtime and heap set-up, its threads,
// package initialisers): about as much as the rest of its isolation work
// (BENCHMARKS.md, "The pass-through front"); and an isolated create's Go
// start costs more than its install (BENCHMARKS.md, "Eighth round"). runc
// does its own pre-runtime work the same way (libcontainer/nsenter).
//
// The front is an optimisation and nothing else: it execs only when it is
// sure that the Go shim would exec the same runtime with the same argv and
// environment (known global flags, a subcommand in its list, a settings
// file in the strict subset that `sforge install` writes, a runtime that is
// not sforge-runtime itself), and it creates only what the Go shim would
// accept, with the config.json the Go shim would write; in every other
// case it returns and the Go shim runs as before. front_test.go and create_test.go check the C readers and the
// create decision against the Go ones (also as fuzz targets), and the
// integration tests run the same command lines with and without it
// ($SFORGE_RUNTIME_NO_FRONT set turns it off).
//
// Only cmd/sforge-runtime may import this package: the constructor runs in
// whatever binary links it (a test checks that no other command does).
// Built without cgo (CGO_ENABLED=0) the package is empty, Built and
// Created are false; the shim then works as before, only slower.
package front
