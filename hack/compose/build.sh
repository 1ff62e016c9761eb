#!/usr/bin/env bash
# Builds the Compose v2 CLI (the project is github.com/docker/compose/v5
# now) that the integration tests drive as Inspect AI's Docker sandbox and
# Harbor do, from its Go module, into
#   ${SFORGE_COMPOSE_CACHE:-/var/cache/sforge/compose}/v<CV>/bin/docker-compose
# and skips everything when that binary exists and the stamp matches.
#
# Why from the Go module: CI machines have no release downloads, and
# Debian's docker-compose is the Python 1.x. The standalone binary talks to
# the daemon DOCKER_HOST names, like `docker compose`.
set -euo pipefail

CV=${SFORGE_COMPOSE_VERSION:-5.6.0}
CACHE=${SFORGE_COMPOSE_CACHE:-/var/cache/sforge/compose}/v$CV
BIN=$CACHE/bin
SRC=$CACHE/src
HERE=$(cd "$(dirname "$0")" && pwd)

stamp_want() {
  printf 'compose=%s go=%s script=%s\n' "$CV" "$(go env GOVERSION)" "$(sha256sum "$HERE/build.sh" | cut -d' ' -f1)"
}
up_to_date() {
  [[ -f $CACHE/stamp && "$(cat "$CACHE/stamp")" == "$(stamp_want)" && -x $BIN/docker-compose ]]
}

mkdir -p "$CACHE"
if up_to_date; then echo "hack/compose/build.sh: docker-compose v$CV up to date in $BIN"; exit 0; fi

exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  echo "hack/compose/build.sh: another build holds $CACHE/.lock, waiting (up to 30 min)"
  flock -w 1800 9 || { echo "hack/compose/build.sh: failed to take $CACHE/.lock within 30 min" >&2; exit 1; }
fi
if up_to_date; then echo "hack/compose/build.sh: docker-compose v$CV up to date in $BIN"; exit 0; fi

start=$(date +%s)
rm -rf "$SRC" && mkdir -p "$SRC" "$BIN"
cd "$SRC"
cat > go.mod <<MOD
module sforge.invalid/compose-build

go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')
MOD
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/docker/compose/v5/cmd"
GO
go get "github.com/docker/compose/v5/cmd@v$CV"
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/docker/compose/v5/internal.Version=v$CV" \
  -o "$BIN/docker-compose.new" github.com/docker/compose/v5/cmd
mv "$BIN/docker-compose.new" "$BIN/docker-compose"
stamp_want > "$CACHE/stamp"
echo "hack/compose/build.sh: built docker-compose v$CV in $(( $(date +%s) - start ))s into $BIN"
