#!/usr/bin/env bash
# Restart time of the real server (docs/durability.md): starts exposure-filter-server
# on an existing data dir, waits for its recovery line, and prints the time
# the line reports beside the process's CPU seconds at that moment (user and
# system, from /proc/<pid>/stat), with the page cache dropped first (cold) or
# not (warm). Then kills the server with SIGKILL: no final snapshot, so every
# run recovers the same snapshot (plus an empty log tail).
#   bash bench/restart_time.sh DATA_DIR [cold|warm]...   (default: cold warm)
# Make the data dir with persist_bench (docs/durability.md, "Figures"):
#   EF_BENCH_DIR=/tmp/ef_1m EF_BENCH_USERS=1000000 \
#     build/bench/persist_bench --benchmark_filter=SnapshotWrite
# Cold runs need root (they write /proc/sys/vm/drop_caches, for the whole
# machine). Environment: BUILD (build), SERVER (its exposure-filter-server).
set -euo pipefail
cd "$(dirname "$0")/.."

data_dir=${1:?usage: restart_time.sh DATA_DIR [cold|warm]...}
shift
modes=("$@")
((${#modes[@]})) || modes=(cold warm)
BUILD=${BUILD:-build}
SERVER=${SERVER:-$BUILD/src/server/exposure-filter-server}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
ticks=$(getconf CLK_TCK)

for mode in "${modes[@]}"; do
  case $mode in
    cold) sync; echo 3 >/proc/sys/vm/drop_caches ;;
    warm) cat "$data_dir"/snapshot-*.efs >/dev/null ;;  # in the cache
    *) echo "restart_time: mode is cold or warm, not $mode" >&2; exit 2 ;;
  esac
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  # Emptied here, not by the child's redirection, which may happen after
  # the loop below has already read the previous run's line.
  : >"$log"
  # Port 0 and no admin port: runs beside any other server on the machine.
  "$SERVER" --data_dir="$data_dir" --listen=127.0.0.1:0 --admin_listen= \
    >>"$log" 2>&1 &
  pid=$!
  line=
  while kill -0 "$pid" 2>/dev/null; do
    line=$(grep -m1 'recovery: .* users from snapshot' "$log" || true)
    [[ -n $line ]] && break
    sleep 0.05
  done
  if [[ -z $line ]]; then
    echo "restart_time: server exited before recovering:" >&2
    cat "$log" >&2
    exit 1
  fi
  # Fields 14 and 15 of /proc/<pid>/stat: utime and stime in clock ticks
  # (the command name, field 2, holds no spaces here).
  read -r utime stime < <(cut -d' ' -f14,15 "/proc/$pid/stat")
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  awk -v m="$mode" -v l="$load" -v u="$utime" -v s="$stime" -v t="$ticks" \
    -v r="${line#*level=info }" \
    'BEGIN { printf "%s\tload %s\tuser %.2fs\tsys %.2fs\t%s\n", m, l, u / t, s / t, r }'
done
