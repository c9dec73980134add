#!/usr/bin/env bash
# Builds the container image offline and checks it: the server starts inside
# it as uid 65532 and answers the image's own HEALTHCHECK (exposure-filter-cli
# health) with SERVING, the runtime stage carries no compiler or -dev
# packages, and SIGTERM stops it cleanly (exit 0).
#
# No registry is reachable here, so the Debian base images are built locally
# with debootstrap by shared/tools/make-base-image.sh (once; podman keeps
# them). `podman run` does not work in this sandbox (no cgroups); the image is
# run with `buildah from` + `buildah run --isolation chroot` instead.
#
#   scripts/container-check.sh             # as root; installs podman/buildah
#   EF_IMAGE=exposure-filter:ci scripts/container-check.sh
# Fails loudly (non-zero, with the server's output) on any problem.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
image=${EF_IMAGE:-localhost/exposure-filter:dev}
base=localhost/debian:bookworm
runtime=localhost/debian:bookworm-slim

say() { echo "container-check: $*"; }
fail() { echo "container-check: FAILED: $*" >&2; exit 1; }

if [[ $(id -u) -ne 0 ]]; then
  fail "run as root (podman/buildah with chroot isolation need it)"
fi
need=()
for t in podman buildah debootstrap; do command -v "$t" >/dev/null || need+=("$t"); done
if ((${#need[@]})); then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- Base images -------------------------------------------------------------
if ! podman image exists "$base" || ! podman image exists "$runtime"; then
  # Only the variable or the path relative to this checkout: no machine's
  # absolute path, so a checkout elsewhere fails here with what to set.
  if [[ -n "${EF_MAKE_BASE_IMAGE:-}" ]]; then
    maker=$EF_MAKE_BASE_IMAGE
    [[ -f "$maker" ]] || fail "EF_MAKE_BASE_IMAGE=$maker: no such file"
  else
    maker="$(cd "$repo/.." && pwd)/shared/tools/make-base-image.sh"
    [[ -f "$maker" ]] || fail "no $maker (shared/tools/ beside the checkout); set EF_MAKE_BASE_IMAGE=/path/to/make-base-image.sh"
  fi
  say "building the Debian base images with $maker (debootstrap, several minutes)"
  bash "$maker" --slim
fi

# --- Image -------------------------------------------------------------------
say "building $image"
start=$(date +%s)
podman build --isolation chroot --network host --format docker \
  --build-arg BASE_IMAGE="$base" --build-arg RUNTIME_IMAGE="$runtime" \
  -t "$image" "$repo" >/tmp/container-check-build.log 2>&1 \
  || { tail -40 /tmp/container-check-build.log >&2; fail "podman build (log: /tmp/container-check-build.log)"; }
say "built $image in $(( $(date +%s) - start ))s ($(podman image inspect --format '{{.Size}}' "$image") bytes)"

# --- Image configuration -------------------------------------------------------
config() { podman image inspect --format "$1" "$image"; }
[[ "$(config '{{.Config.User}}')" == "65532:65532" ]] || fail "image user is '$(config '{{.Config.User}}')', want 65532:65532"
exposed=$(config '{{json .Config.ExposedPorts}}')
for p in 50051/tcp 9464/tcp; do
  [[ "$exposed" == *"\"$p\""* ]] || fail "image does not EXPOSE $p ($exposed)"
done
[[ "$(config '{{json .Config.Volumes}}')" == *'"/var/lib/exposure-filter"'* ]] || fail "no data volume"
healthcheck=$(config '{{json .Config.Healthcheck}}')
[[ "$healthcheck" == *'exposure-filter-cli","health'* ]] || fail "HEALTHCHECK is not 'exposure-filter-cli health': $healthcheck"
say "image config ok: user 65532, ports 50051+9464, volume, HEALTHCHECK $healthcheck"

# --- Run it --------------------------------------------------------------------
ctr=$(buildah from "$image")
server_pid=""
server_log=$(mktemp /tmp/container-check-server.XXXXXX.log)
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  buildah rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
in_ctr() { buildah run --isolation chroot --network host "$ctr" -- "$@"; }

[[ "$(in_ctr id -u)" == 65532 ]] || fail "the container does not run as uid 65532"
# Only runtime libraries: no compiler and no -dev package in the final stage.
if in_ctr sh -c 'command -v cc c++ gcc g++ cmake protoc' >/dev/null 2>&1; then
  fail "the runtime image contains build tools"
fi
dev=$(in_ctr dpkg-query -W -f '${Package}\n' | grep -- '-dev$' || true)
[[ -z "$dev" ]] || fail "the runtime image contains -dev packages: $dev"
say "runtime stage ok: uid 65532, no build tools, no -dev packages"

# The network is the host's: a free port, so a server already running on
# 50051 here does not answer in our place.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
in_ctr /usr/local/bin/exposure-filter-server --listen="127.0.0.1:$port" \
  >"$server_log" 2>&1 &
server_pid=$!

# The image's HEALTHCHECK command, inside the container, on our port.
serving=0
for _ in $(seq 1 120); do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    cat "$server_log" >&2
    fail "the server exited before serving"
  fi
  if out=$(in_ctr /usr/local/bin/exposure-filter-cli health \
             --address="127.0.0.1:$port" --deadline=2s 2>&1) \
     && [[ "$out" == SERVING ]]; then
    serving=1
    break
  fi
  sleep 0.5
done
if ((!serving)); then
  cat "$server_log" >&2
  fail "no SERVING from 'exposure-filter-cli health' within 60s (last: $out)"
fi
say "server inside the image answers health: SERVING (port $port)"

# Clean shutdown: SIGTERM to the server (buildah's child under chroot
# isolation) ends it with exit 0.
descendants() {
  local p
  for p in $(pgrep -P "$1" || true); do echo "$p"; descendants "$p"; done
}
srv=""
for p in $(descendants "$server_pid"); do
  # comm is the first 15 bytes of the executable name.
  if [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == exposure-filte* ]]; then srv=$p; fi
done
[[ -n "$srv" ]] || fail "cannot find the server process under buildah run"
kill -TERM "$srv"
rc=0
wait "$server_pid" || rc=$?
server_pid=""
if [[ $rc -ne 0 ]] || ! grep -q "shutdown complete" "$server_log"; then
  cat "$server_log" >&2
  fail "the server did not shut down cleanly on SIGTERM (exit $rc)"
fi
say "SIGTERM: clean shutdown, exit 0"
say "OK: $image builds offline, starts as uid 65532 and serves health"
