# The Debian packages sforge needs, as one list for hack/quickstart.sh and
# hack/deps.sh (sourced by both). Each entry is "CHECK PACKAGE": CHECK is a
# command looked up in PATH, or a path that exists once PACKAGE is installed.

# What the quickstart needs: the build and the Docker demo.
SFORGE_PACKAGES_QUICKSTART=(
  "make make"
  # go build stamps the clone's commit; Go fetches modules over TLS
  "git git"
  "/etc/ssl/certs/ca-certificates.crt ca-certificates"
  "curl curl"
  "ip iproute2"
  "iptables iptables"
  "runc runc"
  "dockerd docker.io"
  "docker docker.io"
  "busybox busybox-static"
)

# What the tests need on top of it.
SFORGE_PACKAGES_TEST=(
  "iptables-nft iptables"
  "iptables-legacy iptables"
  "nft nftables"
  "podman podman"
  # rootless podman and Docker: their user namespace, their networks
  "newuidmap uidmap"
  "slirp4netns slirp4netns"
  "rootlesskit rootlesskit"
  "containerd containerd"
  "/usr/lib/cni/bridge containernetworking-plugins"
  "nginx nginx"
  "squid squid"
  # the ways harnesses enter a container: docker-compose exec and the
  # Docker SDK's exec_run
  "docker-compose docker-compose"
  "/usr/lib/python3/dist-packages/docker python3-docker"
  # the benchmarks' seed baseline as the seed ran it (`sudo -n iptables` per rule)
  "sudo sudo"
  # the real agent CLIs come from npm (hack/agents/install.sh)
  "npm npm"
  # the test node's cluster resolver, which forwards a test zone (the DNS
  # tunnel an isolated Pod must not reach)
  "dnsmasq dnsmasq-base"
  # the test node's static pause (hack/k8s/pause.c)
  "gcc gcc"
  "/usr/include/stdlib.h libc6-dev"
  # the quickstart's proof on a fresh Debian root filesystem
  "debootstrap debootstrap"
)

# sforge_missing_packages ENTRY...: the packages of the entries whose check
# fails, sorted, one per line.
sforge_missing_packages() {
  local entry check pkg
  for entry in "$@"; do
    check=${entry%% *} pkg=${entry#* }
    if [[ $check == /* ]]; then
      [[ -e $check ]] && continue
    else
      command -v "$check" >/dev/null 2>&1 && continue
    fi
    echo "$pkg"
  done | sort -u
}
