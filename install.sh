#!/usr/bin/env bash
# Thin bootstrap: build sforge when Go is here, put its binaries in
# $PREFIX/bin, then register them with the container runtimes found on this
# host (`sforge install`, which says what it changed). Arguments are passed
# to `sforge install`, e.g. `./install.sh --dry-run` or `./install.sh --docker`.
# Environment: PREFIX (default /usr/local), BIN (build directory, default bin).
set -euo pipefail
cd "$(dirname "$0")"
PREFIX=${PREFIX:-/usr/local}
BIN=${BIN:-bin}
bins=(sforge sforge-runtime sforge-hook sforge-cni)

if command -v go >/dev/null 2>&1; then
  # Incremental: Go's build cache makes this cheap when nothing changed.
  make --no-print-directory build BIN="$BIN"
else
  for b in "${bins[@]}"; do
    [[ -x $BIN/$b ]] || { echo "install.sh: $BIN/$b is missing and Go is not installed to build it (https://go.dev/doc/install)" >&2; exit 1; }
  done
fi

dry_run=0
for a in "$@"; do [[ $a == --dry-run ]] && dry_run=1; done
if ((dry_run)); then
  echo "install.sh: dry run: would copy ${bins[*]} to $PREFIX/bin"
  exec "$BIN/sforge" install --prefix "$PREFIX" "$@"
fi

install -d "$PREFIX/bin"
for b in "${bins[@]}"; do
  [[ -e $BIN/$b ]] || continue
  # Copy then rename, so a runtime starting a container meanwhile never
  # executes a half-written shim or hook.
  install -m 0755 "$BIN/$b" "$PREFIX/bin/.$b.new"
  mv -f "$PREFIX/bin/.$b.new" "$PREFIX/bin/$b"
  echo "installed $PREFIX/bin/$b"
done
exec "$PREFIX/bin/sforge" install --prefix "$PREFIX" "$@"
