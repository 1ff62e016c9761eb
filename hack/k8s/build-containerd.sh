#!/usr/bin/env bash
# Builds containerd 2.x (the daemon, its runc shim and ctr) from the Go
# module github.com/containerd/containerd/v2, into
#   ${SFORGE_CONTAINERD2_CACHE:-/var/cache/sforge/containerd}/v<CV>/bin
# for the containerd 2 variant of the single-node cluster
# (internal/testcluster's Containerd2 option, TestK8sNodeContainerd2), and
# skips everything when those binaries exist and the stamp matches.
#
# Why a second containerd: Debian 12 ships 1.6, which the 1.37 kubelet
# accepts with a deprecation warning (no CRI RuntimeConfig; expected to be
# refused from kubelet 1.38), and containerd 2 changed the CRI plugin
# (config version 3, split io.containerd.cri.v1.{runtime,images} plugins)
# and how it hands Pod annotations to CNI. The tests run sforge-cni on both.
#
# Like hack/k8s/build.sh: a wrapper module whose main packages are copied
# verbatim from the pinned module (cmd/<name>/main.go), GOCACHE left as the
# machine's, a lock for concurrent callers. A separate script with its own
# stamp, so that changing it does not rebuild the Kubernetes binaries.
set -euo pipefail

CV=${SFORGE_CONTAINERD2_VERSION:-2.4.2}
MOD=github.com/containerd/containerd/v2
CMDS=(containerd containerd-shim-runc-v2 ctr)
# No btrfs headers on the machine; devmapper and zfs are not used either.
TAGS="no_btrfs no_devmapper no_zfs"

CACHE=${SFORGE_CONTAINERD2_CACHE:-/var/cache/sforge/containerd}/v$CV
BIN=$CACHE/bin
SRC=$CACHE/src
HERE=$(cd "$(dirname "$0")" && pwd)
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

stamp_want() {
  printf 'containerd=%s go=%s cgo=%s tags=%s cmds=%s script=%s\n' "$CV" "$(go env GOVERSION)" \
    "$(go env CGO_ENABLED)" "$TAGS" "${CMDS[*]}" "$(sha256sum "$HERE/build-containerd.sh" | cut -d' ' -f1)"
}
up_to_date() {
  [[ -f $CACHE/stamp && "$(cat "$CACHE/stamp")" == "$(stamp_want)" ]] || return 1
  local c
  for c in "${CMDS[@]}"; do [[ -x $BIN/$c ]] || return 1; done
}

mkdir -p "$CACHE"
if up_to_date; then echo "hack/k8s/build-containerd.sh: containerd v$CV up to date in $BIN"; exit 0; fi

exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  echo "hack/k8s/build-containerd.sh: another build holds $CACHE/.lock, waiting (up to 30 min)"
  flock -w 1800 9 || { echo "hack/k8s/build-containerd.sh: failed to take $CACHE/.lock within 30 min" >&2; exit 1; }
fi
if up_to_date; then echo "hack/k8s/build-containerd.sh: containerd v$CV up to date in $BIN (built by another caller)"; exit 0; fi

rm -f "$CACHE/stamp"
mkdir -p "$BIN"
t=$SECONDS
S=$SRC/containerd; rm -rf "$S"; mkdir -p "$S"; cd "$S"
go mod init sforge.local/containerd2bins >/dev/null 2>&1
go get "$MOD@v$CV" >"$S/get.log" 2>&1 || { cat "$S/get.log" >&2; exit 1; }
CDIR=$(go mod download -json "$MOD@v$CV" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d $CDIR ]] || { echo "hack/k8s/build-containerd.sh: failed to locate $MOD@v$CV in the module cache" >&2; exit 1; }
pkgs=()
for c in "${CMDS[@]}"; do
  mkdir -p "cmd/$c"; install -m644 "$CDIR/cmd/$c/main.go" "cmd/$c/main.go"; pkgs+=("./cmd/$c")
done
go mod tidy
# Without it the binaries say "2.4.2+unknown".
LDF="-X $MOD/version.Version=v$CV -X $MOD/version.Revision=gomod"
go build -tags "$TAGS" -ldflags "$LDF" -o "$BIN/" "${pkgs[@]}"
echo "hack/k8s/build-containerd.sh: go build ${CMDS[*]} v$CV took $(( SECONDS - t ))s"

"$BIN/containerd" --version
"$BIN/ctr" --version
stamp_want >"$CACHE/stamp"
