#!/usr/bin/env bash
# Thin bootstrap: build sforge if needed and put its binaries in $PREFIX/bin.
# Registration with the container runtimes found on this host is
# `sforge install`'s job (see README).
set -euo pipefail
cd "$(dirname "$0")"
PREFIX=${PREFIX:-/usr/local}
BIN=${BIN:-bin}
if [[ ! -x $BIN/sforge ]]; then
  command -v go >/dev/null || { echo "install.sh: Go is needed to build sforge (https://go.dev/doc/install)" >&2; exit 1; }
  make build BIN="$BIN"
fi
install -d "$PREFIX/bin"
for b in "$BIN"/sforge*; do
  install -m 0755 "$b" "$PREFIX/bin/"
  echo "installed $PREFIX/bin/$(basename "$b")"
done
