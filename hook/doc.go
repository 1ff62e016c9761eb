// Package hook is the OCI hook behind cmd/sforge-hook: it reads the OCI
// state, loads the bundle's config.json, decodes the allowlist and installs
// (createRuntime/prestart) or removes (poststop) the container's chain in
// its network namespace, failing closed.
package hook
