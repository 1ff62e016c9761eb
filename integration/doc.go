// Package integration holds the tests that run sforge against the real
// system: network namespaces, iptables (nft and legacy), runc, dockerd,
// podman, containerd, libcni with the bridge plugin, kube-apiserver + etcd.
// They need root; outside CI they skip with a loud reason, in CI they fail
// when a requirement is missing (see internal/testenv).
package integration
