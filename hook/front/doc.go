// Package front is sforge-hook's front: a few lines of C that run as an
// ELF constructor, before the Go runtime starts, and end a `poststop` that
// has nothing to do; they also play the hook's netlink holder
// (hook.HoldStage), which only waits for the hook to exit.
//
// Why C: runc runs the hooks.d poststop entry (podman, CRI-O) for every
// isolated container, and for one whose network namespace was its own
// there is nothing to remove: the rules died with the namespace. The Go
// hook returns at once there, but only after a Go process start (runtime
// and heap set-up, threads, package initialisers), 7–8 ms of CPU on the
// machines of BENCHMARKS.md, on every container's deletion. The front reads
// the state and config.json as the Go hook does and exits 0 in about
// the cost of /bin/true; sforge-runtime's front (shim/front) does the same
// for the runtime's pass-through commands.
//
// The front is an optimisation and nothing else: it exits only when it is
// sure that the Go hook would return 0 without doing or logging anything
// (a poststop with arguments the hook reads, a state and a config.json that
// encoding/json decodes into the hook's lean structs, the network namespace
// absent, without a path, or with a path that does not exist); in every
// other case it puts the state it read back on fd 0 (a memory file) and the
// Go hook runs as before. front_test.go checks the C readers against the Go
// ones (also as fuzz targets), and the integration tests run the hook with
// and without it ($SFORGE_HOOK_NO_FRONT set turns it off).
//
// Only cmd/sforge-hook may import this package: the constructor runs in
// whatever binary links it (a test checks that no other command does).
// Built without cgo (CGO_ENABLED=0) the package is empty and Built is
// false; the hook then works as before, only slower.
package front
