#!/usr/bin/env bash
# Installs the Debian packages that sforge's tests need, when run as root and
# when something is missing. Does nothing otherwise (a non-root developer can
# still run `make test-unit`).
set -euo pipefail

. "$(dirname "$0")/packages.sh"
mapfile -t missing < <(sforge_missing_packages "${SFORGE_PACKAGES_QUICKSTART[@]}" "${SFORGE_PACKAGES_TEST[@]}")
((${#missing[@]})) || exit 0

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
