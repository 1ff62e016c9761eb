#!/usr/bin/env bash
# Builds the Kubernetes binaries the integration tests run (etcd,
# kube-apiserver, kube-controller-manager, and the kubelet of the
# single-node cluster in internal/testcluster) from Go modules only, into
#   ${SFORGE_K8S_CACHE:-/var/cache/sforge/k8s}/v<KV>/bin
# and skips everything when those binaries exist and the stamp matches.
#
# Why from Go modules: CI machines have no Kubernetes release downloads, only
# the Go module proxy and Debian. k8s.io/kubernetes is not meant to be
# required as a module: its go.mod points the staging modules (k8s.io/api,
# k8s.io/apiserver, ...) at ./staging. A wrapper module requires it and
# replaces each staging module by its published v0.<minor>.<patch> twin.
#
# GOCACHE/GOMODCACHE/GOFLAGS are left as the machine's so that CI reuses the
# build cache across runs: with a warm cache a rebuild takes seconds (a link
# step per binary when the list below changes); a cold one takes ~20 min on 2
# cores (the README's testing section has the measured figures). A lock
# serialises concurrent callers (make test and a test harness, or two
# worktrees sharing the cache).
set -euo pipefail

KV=${SFORGE_K8S_VERSION:-1.37.2}   # Kubernetes
EV=${SFORGE_ETCD_VERSION:-3.6.16}  # etcd
SV=0.${KV#1.}                      # staging modules: k8s 1.37.2 -> v0.37.2

# Kubernetes commands to build: <cmd dir>:<main file in k8s.io/kubernetes/cmd/<dir>>.
# One line per binary; the stamp covers this list, so adding one rebuilds.
# kube-scheduler: `sforge run --backend k8s` creates Pods as a user would,
# without spec.nodeName, so the test node needs a scheduler.
K8S_CMDS=(
  kube-apiserver:apiserver.go
  kube-controller-manager:controller-manager.go
  kube-scheduler:scheduler.go
  kubelet:kubelet.go
)

CACHE=${SFORGE_K8S_CACHE:-/var/cache/sforge/k8s}/v$KV
BIN=$CACHE/bin
SRC=$CACHE/src
HERE=$(cd "$(dirname "$0")" && pwd)

stamp_want() {
  # Everything that changes the output: versions, toolchain, command list, this script.
  printf 'k8s=%s etcd=%s go=%s cgo=%s cmds=%s script=%s\n' "$KV" "$EV" "$(go env GOVERSION)" \
    "${CGO_ENABLED:-0}" "${K8S_CMDS[*]}" "$(sha256sum "$HERE/build.sh" | cut -d' ' -f1)"
}
up_to_date() {
  [[ -f $CACHE/stamp && "$(cat "$CACHE/stamp")" == "$(stamp_want)" ]] || return 1
  local c
  for c in etcd "${K8S_CMDS[@]%%:*}"; do [[ -x $BIN/$c ]] || return 1; done
}

mkdir -p "$CACHE"
if up_to_date; then echo "hack/k8s/build.sh: k8s v$KV binaries up to date in $BIN"; exit 0; fi

exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  echo "hack/k8s/build.sh: another build holds $CACHE/.lock, waiting (up to 60 min)"
  flock -w 3600 9 || { echo "hack/k8s/build.sh: failed to take $CACHE/.lock within 60 min" >&2; exit 1; }
fi
if up_to_date; then echo "hack/k8s/build.sh: k8s v$KV binaries up to date in $BIN (built by another caller)"; exit 0; fi

# Static binaries, no gcc needed; matches how upstream ships the control plane.
export CGO_ENABLED=${CGO_ENABLED:-0}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
rm -f "$CACHE/stamp"
mkdir -p "$BIN"
t_all=$SECONDS
step() { echo "hack/k8s/build.sh: $*"; }
took() { step "$1 took $(( SECONDS - $2 ))s"; }

# --- Kubernetes: one wrapper module, the mains copied verbatim from k8s.io/kubernetes/cmd/* ---
t=$SECONDS
S=$SRC/k8s; rm -rf "$S"; mkdir -p "$S"; cd "$S"
go mod init sforge.local/k8sbins >/dev/null 2>&1
go mod download k8s.io/kubernetes@v"$KV"
KDIR=$(go mod download -json k8s.io/kubernetes@v"$KV" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
KMOD=$(go mod download -json k8s.io/kubernetes@v"$KV" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[[ -d $KDIR && -f $KMOD ]] || { echo "hack/k8s/build.sh: failed to locate k8s.io/kubernetes@v$KV in the module cache" >&2; exit 1; }
go mod edit -require k8s.io/kubernetes@v"$KV"
n=0
for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$KMOD"); do
  go mod edit -replace "$m=$m@v$SV"; n=$((n + 1))
done
(( n > 0 )) || { echo "hack/k8s/build.sh: found no ./staging replaces in $KMOD" >&2; exit 1; }
pkgs=()
for c in "${K8S_CMDS[@]}"; do
  d=${c%%:*} f=${c##*:}
  mkdir -p "cmd/$d"; install -m644 "$KDIR/cmd/$d/$f" "cmd/$d/main.go"; pkgs+=("./cmd/$d")
done
go mod tidy
took "k8s module setup ($n staging replaces)" "$t"

t=$SECONDS
LDF="-X k8s.io/component-base/version.gitVersion=v$KV -X k8s.io/component-base/version.gitMajor=1"
LDF+=" -X k8s.io/component-base/version.gitMinor=$(echo "$KV" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
go build -ldflags "$LDF" -o "$BIN/" "${pkgs[@]}"
took "go build ${K8S_CMDS[*]%%:*}" "$t"

# --- etcd: a one-line main around etcdmain.Main ---
t=$SECONDS
E=$SRC/etcd; rm -rf "$E"; mkdir -p "$E"; cd "$E"
go mod init sforge.local/etcdbin >/dev/null 2>&1
cat >main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
go get go.etcd.io/etcd/server/v3@v"$EV" >"$E/get.log" 2>&1 || { cat "$E/get.log" >&2; exit 1; }
go mod tidy
go build -o "$BIN/etcd" .
took "go build etcd v$EV" "$t"

# The binaries must run before the stamp says they are good.
"$BIN/kube-apiserver" --version
"$BIN/kubelet" --version
"$BIN/etcd" --version | sed -n 1p  # sed reads everything: head would SIGPIPE etcd and fail the pipefail
stamp_want >"$CACHE/stamp"
took "hack/k8s/build.sh total" "$t_all"
