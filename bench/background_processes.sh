# shellcheck shell=bash
# Sourced by the bench scripts that start servers in the background
# (compare.sh, compare_releases.sh): every started process is killed and
# reaped when the script exits, and wait_port blocks until a server listens.
# The caller sets BENCH_NAME (the prefix of its error messages).

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# wait_port PORT: up to 10 s for something to accept on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "${BENCH_NAME:-bench}: nothing listening on 127.0.0.1:$1" >&2
  exit 1
}
