#!/usr/bin/env bash
# sforge quickstart: on a fresh Debian 12 machine, as root, from a clone of
# this repository:
#
#   sudo bash hack/quickstart.sh
#
# installs the Debian packages that are missing (hack/packages.sh lists
# them: make, git, curl, iptables, runc, docker.io, busybox-static, ...),
# starts dockerd when none runs, builds sforge, registers its runtime with
# Docker (sforge install --docker), starts a small local judge on the Docker
# bridge and runs examples/hello-judge with --disable-internet: the agent
# reaches the judge and is refused everywhere else.
#
# Every step says what it does; a step that cannot be done stops the script
# with the reason and the fix. Settings (environment):
#   DOCKER_HOST                 the daemon to use (default the local socket)
#   SFORGE_QS_STATE             where pid files and logs go (/var/lib/sforge-quickstart)
#   SFORGE_QS_DOCKER_CONFIG     daemon.json for the runtime registration (/etc/docker/daemon.json)
#   SFORGE_QS_DOCKER_DATA_ROOT  --data-root when this script starts dockerd (dockerd's default)
#   SFORGE_QS_JUDGE_PORT        the judge's port (8080; the decoy uses the next one)
#   SFORGE_QS_STOP_AFTER=build  stop after installing and building
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

STATE=${SFORGE_QS_STATE:-/var/lib/sforge-quickstart}
DOCKER_CONFIG_FILE=${SFORGE_QS_DOCKER_CONFIG:-/etc/docker/daemon.json}
JUDGE_PORT=${SFORGE_QS_JUDGE_PORT:-8080}
export DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}
IMAGE=sforge-example/busybox:1
GO_MIN=1.26

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'quickstart: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root (sudo bash hack/quickstart.sh): it installs packages, may start dockerd and registers a container runtime"
mkdir -p "$STATE"

step "1/6 system packages (only what is missing)"
. hack/packages.sh
mapfile -t missing < <(sforge_missing_packages "${SFORGE_PACKAGES_QUICKSTART[@]}")
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install them with your package manager, then run this again"
  echo "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q || die "apt-get update failed (see above): check /etc/apt/sources.list and the network, then run this again"
  apt-get install -y -q --no-install-recommends "${missing[@]}" || die "apt-get install ${missing[*]} failed (see above): install them by hand, then run this again"
else
  echo "every package the build and the demo need is present"
fi

step "2/6 build sforge"
if command -v go >/dev/null 2>&1; then
  have=$(go env GOVERSION | sed 's/^go//')
  if [[ $(printf '%s\n%s\n' "$GO_MIN" "$have" | sort -V | head -1) != "$GO_MIN" ]]; then
    die "Go $have is too old: sforge needs Go $GO_MIN or newer (https://go.dev/doc/install); Debian's golang package is older"
  fi
  make build || die "make build failed (see above): with Go $have this should not happen; please report it with the output"
  go build -o bin/sforge-example-judge ./examples/judge || die "building the example judge failed (see above)"
elif [[ -x bin/sforge && -x bin/sforge-runtime && -x bin/sforge-hook && -x bin/sforge-example-judge ]]; then
  echo "no Go toolchain; using the binaries already in bin/"
else
  die "Go $GO_MIN or newer is needed to build sforge (https://go.dev/doc/install), then run this again"
fi
SFORGE=$ROOT/bin/sforge
if [[ ${SFORGE_QS_STOP_AFTER:-} == build ]]; then
  echo "stopping after the build (SFORGE_QS_STOP_AFTER=build)"
  exit 0
fi

step "3/6 dockerd"
if docker info >/dev/null 2>&1; then
  echo "dockerd answers at $DOCKER_HOST"
else
  [[ $DOCKER_HOST == unix://* ]] || die "no Docker daemon answers at $DOCKER_HOST; start it, then run this again"
  if [[ $DOCKER_HOST == unix:///var/run/docker.sock ]] && command -v systemctl >/dev/null 2>&1 && systemctl start docker 2>/dev/null; then
    echo "started docker.service"
  else
    echo "starting dockerd in the background (pid file $STATE/dockerd.pid, log $STATE/dockerd.log)"
    # Name the config file explicitly: runtimes registered in it later are
    # read again on SIGHUP.
    if [[ ! -e $DOCKER_CONFIG_FILE ]]; then
      mkdir -p "$(dirname "$DOCKER_CONFIG_FILE")"
      echo '{}' >"$DOCKER_CONFIG_FILE"
    fi
    args=(--pidfile "$STATE/dockerd.pid" -H "$DOCKER_HOST" --config-file "$DOCKER_CONFIG_FILE")
    [[ -n ${SFORGE_QS_DOCKER_DATA_ROOT:-} ]] && args+=(--data-root "$SFORGE_QS_DOCKER_DATA_ROOT" --exec-root "$SFORGE_QS_DOCKER_DATA_ROOT/exec")
    nohup dockerd "${args[@]}" >"$STATE/dockerd.log" 2>&1 &
    echo "stop it later with: kill \$(cat $STATE/dockerd.pid)"
  fi
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || die "dockerd did not come up within 60s; see $STATE/dockerd.log"
fi

step "4/6 register the sforge runtime with Docker"
if ! "$SFORGE" install --help >/dev/null 2>&1; then
  die "this build has no \`sforge install\` yet (the runtime registration is not merged); register by hand: add \"runtimes\": {\"sforge\": {\"path\": \"$ROOT/bin/sforge-runtime\"}} to $DOCKER_CONFIG_FILE, send SIGHUP to dockerd, and run this again"
fi
"$SFORGE" install --docker --docker-config "$DOCKER_CONFIG_FILE" --prefix "$ROOT"
# dockerd reads runtimes again on SIGHUP; make sure the one we started does.
[[ -s $STATE/dockerd.pid ]] && kill -HUP "$(cat "$STATE/dockerd.pid")" 2>/dev/null || true
for _ in $(seq 30); do docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"sforge"' && break; sleep 1; done
docker info --format '{{json .Runtimes}}' | grep -q '"sforge"' || die "dockerd does not list runtime sforge after sforge install; check $DOCKER_CONFIG_FILE and reload dockerd (SIGHUP)"
echo "runtime sforge is registered"

step "5/6 example image and local judge"
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  # No registry needed: an image made of busybox-static and its applets.
  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/etc"
  cp "$(command -v busybox)" "$rootfs/bin/busybox"
  for a in $("$rootfs/bin/busybox" --list); do [[ $a == busybox ]] || ln -s busybox "$rootfs/bin/$a"; done
  tar -C "$rootfs" -c . | docker import - "$IMAGE" >/dev/null
  echo "imported $IMAGE"
fi
GW=$(docker network inspect bridge --format '{{range .IPAM.Config}}{{.Gateway}}{{end}}')
# A default bridge without --bip lists no gateway (Docker 20.10): docker0 has it.
[[ -n $GW ]] || GW=$(ip -4 -o addr show dev docker0 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
[[ -n $GW ]] || die "cannot find the Docker bridge gateway (docker network inspect bridge; ip addr show docker0)"
JUDGE=http://$GW:$JUDGE_PORT
DECOY=http://$GW:$((JUDGE_PORT + 1))/
"$ROOT/bin/sforge-example-judge" --listen "$GW:$JUDGE_PORT" --forbidden-listen "$GW:$((JUDGE_PORT + 1))" >"$STATE/judge.log" 2>&1 &
judge_pid=$!
trap 'kill $judge_pid 2>/dev/null || true; rm -rf "${rootfs:-/nonexistent}"' EXIT
for _ in $(seq 50); do curl -sf "$JUDGE/" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "$JUDGE/" >/dev/null || die "the example judge did not start on $GW:$JUDGE_PORT; see $STATE/judge.log"
echo "judge on $JUDGE; a decoy on $DECOY that the agent must not reach"

step "6/6 run examples/hello-judge with the network isolated"
FORBIDDEN_URLS=$DECOY "$SFORGE" run --task examples/hello-judge --agent command \
  --judge-url "$JUDGE" --disable-internet --env FORBIDDEN_URLS --report "$STATE/report.json"
echo
echo "Done: the agent reached the judge, and the decoy (same host, another port) was refused."
echo "Report: $STATE/report.json. Next: run the whole test suite with 'make test'."
