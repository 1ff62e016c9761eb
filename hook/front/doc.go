// Package front is sforge-hook's front: C that runs as an ELF constructor,
// before the Go runtime starts. It ends a `poststop` that has nothing to
// do, removes the rules of a `poststop` whose namespace outlives the
// container, installs the rules of a `createRuntime` (or `prestart`) it
// reads without doubt, and plays the hook's netlink holder
// (hook.HoldStage), which only waits for the hook to exit.
//
// Why C: a Go process start (runtime and heap set-up, threads, package
// initialisers) costs 7–8 ms of CPU on the machines of BENCHMARKS.md, and
// runc runs the hooks.d entries (podman, CRI-O) twice per isolated
// container, at create and at delete. At poststop, for a container whose
// network namespace was its own, there is nothing to remove: the rules
// died with the namespace; for one whose namespace outlives it (pods,
// `--network container:`), the removal is one netlink batch. At
// createRuntime the work itself, one netlink batch and the check of its
// echo, takes a fraction of the Go start.
//
// The front is an optimisation and nothing else. At poststop it exits only
// when it is sure that the Go hook would return 0 without doing or logging
// anything (a state and a config.json that encoding/json decodes into the
// hook's lean structs, the network namespace absent, without a path, or
// with a path that does not exist); it removes our table only when it is
// sure the Go hook would remove the same table from the same namespace
// with the nftables engine (sforge_hook_front_decide_remove: the namespace
// path there and not the host's, an allowlist that decodes), with the same
// batch and the same hand-off of its socket to a holder, and leaves the
// removal to the Go hook whenever its own did not go through. At
// createRuntime it installs only when it is sure the Go hook would install
// the same allowlist in the same namespace (sforge_hook_front_decide: the
// allowlist decoded as policy.Decode does, capabilities and namespaces
// checked as hook.install checks them, the engine auto or nftables) and
// the C engine (internal/cfront/nft.h) finds the kernel's echo of its
// batch equal to its plan, as the Go engine verifies its read-back; it
// exits 0 when the container has no allowlist at all. In every
// other case, each refusal included, it puts the state it read back on fd
// 0 (a memory file) and the Go hook runs as before, so that what a user
// reads is the Go hook's message. The one exception fails closed: should
// the thread be unable to leave the container's namespace, the front
// refuses the container itself. front_test.go checks the C decisions
// against the Go hook's (also as fuzz targets); internal/cfront/cfronttest
// checks the C engine against the Go one in real namespaces; the
// integration tests run the hook with and without the front
// ($SFORGE_HOOK_NO_FRONT set turns it off).
//
// Only cmd/sforge-hook may import this package: the constructor runs in
// whatever binary links it (a test checks that no other command does).
// Built without cgo (CGO_ENABLED=0) the package is empty and Built is
// false; the hook then works as before, only slower.
package front
