#!/usr/bin/env bash
# Installs the Debian packages that sforge's tests need, when run as root and
# when something is missing. Does nothing otherwise (a non-root developer can
# still run `make test-unit`).
set -euo pipefail

# command -> package
declare -A need=(
  [iptables-nft]=iptables
  [iptables-legacy]=iptables
  [nft]=nftables
  [ip]=iproute2
  [runc]=runc
  [dockerd]=docker.io
  [podman]=podman
  # rootless podman and Docker (TestRuntimePodmanRootless,
  # TestRuntimeDockerRootless): their user namespace, their networks
  [newuidmap]=uidmap
  [slirp4netns]=slirp4netns
  [rootlesskit]=rootlesskit
  [containerd]=containerd
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [busybox]=busybox-static
  [nginx]=nginx
  [squid]=squid
  [curl]=curl
  # the ways harnesses enter a container (integration/exec_test.go):
  # docker-compose exec and the Docker SDK's exec_run
  [docker-compose]=docker-compose
  [/usr/lib/python3/dist-packages/docker]=python3-docker
  # the benchmarks' seed baseline as the seed ran it (`sudo -n iptables` per rule)
  [sudo]=sudo
  # the test node's static pause (internal/testcluster, hack/k8s/pause.c)
  [gcc]=gcc
  [/usr/include/stdlib.h]=libc6-dev
)

missing=()
for cmd in "${!need[@]}"; do
  if [[ $cmd == /* ]]; then [[ -e $cmd ]] && continue
  else command -v "$cmd" >/dev/null 2>&1 && continue; fi
  missing+=("${need[$cmd]}")
done
((${#missing[@]})) || exit 0

mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [[ $(id -u) != 0 ]]; then
  echo "hack/deps.sh: missing packages ${missing[*]}; run as root (sudo make deps) to install them" >&2
  exit 0
fi
echo "hack/deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# Debian's daemons must not start on their own: tests start their own
# instances with private data dirs and sockets.
policy_rc=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy_rc ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy_rc" && chmod +x "$policy_rc" && created_policy=1
fi
trap '((created_policy)) && rm -f "$policy_rc"' EXIT
apt-get install -y -q --no-install-recommends "${missing[@]}"
