#!/usr/bin/env bash
# The fixed cost of a unary call (docs/performance.md, "The fixed cost of a
# call"): one client thread, one call in flight, a FilterRecalled of 20
# candidates, against the real server, the transport-ceiling server (no
# work, callback API like the real one) and unary-api-probe (no work) on the
# callback API and on the completion-queue API with one and two queues.
# Servers alternate round by round; the table gives each one's median of
# the rounds: requests/s, server CPU per call and the server's context
# switches per call (how often a call's work moved between threads).
#   bash bench/unary_cost.sh
# Environment: ROUNDS (3), DURATION (4s), WARMUP (1s), THREADS (1: client
# threads, one call in flight each), BUILD (build-release), OUT
# ($BUILD/unary_cost), PORT (50181), ADMIN_PORT (50182).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-4s}
WARMUP=${WARMUP:-1s}
THREADS=${THREADS:-1}
BUILD=${BUILD:-build-release}
OUT=${OUT:-$BUILD/unary_cost}
PORT=${PORT:-50181}
ADMIN_PORT=${ADMIN_PORT:-50182}

scripts/setup.sh "$BUILD" -DCMAKE_BUILD_TYPE=Release -DEF_BUILD_TESTS=OFF
mkdir -p "$OUT"
rm -f "$OUT"/*.json

BENCH_NAME=unary_cost
# shellcheck source=bench/background_processes.sh
source bench/background_processes.sh

# run <name> <preload true|false> <server command...>: starts the server,
# measures, stops it.
run() {
  local name=$1 preload=$2; shift 2
  "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  wait_port "$PORT"
  echo "unary_cost: round $round, $name" >&2
  "$BUILD/bench/exposure-filter-bench" --json --name="$name" \
    --target="127.0.0.1:$PORT" --server_pid="$pid" --mix=filter \
    --candidates=20 --threads="$THREADS" --inflight=1 --users=50 \
    --exposures_per_user=100 --preload="$preload" --duration="$DURATION" \
    --warmup="$WARMUP" >"$OUT/$name.$round.json"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

for round in $(seq 1 "$ROUNDS"); do
  rm -rf "$OUT/data"
  run server true "$BUILD/src/server/exposure-filter-server" \
    --listen="127.0.0.1:$PORT" --admin_listen="127.0.0.1:$ADMIN_PORT" \
    --data_dir="$OUT/data" --log_level=warn
  run ceiling false "$BUILD/bench/transport-ceiling-server" \
    --listen="127.0.0.1:$PORT"
  run callback false "$BUILD/bench/unary-api-probe" --api=callback \
    --listen="127.0.0.1:$PORT"
  run async_1cq false "$BUILD/bench/unary-api-probe" --api=async \
    --completion_queues=1 --listen="127.0.0.1:$PORT"
  run async_2cq false "$BUILD/bench/unary-api-probe" --api=async \
    --completion_queues=2 --listen="127.0.0.1:$PORT"
done

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores," \
  "$ROUNDS rounds x $DURATION, $THREADS client thread(s) x 1 call in flight"
/usr/bin/python3 - "$OUT" <<'EOF'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(out.glob("*.json")):
    r = json.loads(f.read_text())
    rows.setdefault(r["name"], []).append(r)
names = {
    "server": "exposure-filter-server (callback API)",
    "ceiling": "transport-ceiling server (callback API, no work)",
    "callback": "unary-api-probe --api=callback (no work)",
    "async_1cq": "unary-api-probe --api=async, 1 queue (no work)",
    "async_2cq": "unary-api-probe --api=async, 2 queues (no work)",
}
def med(runs, key):
    return statistics.median(r[key] for r in runs)
base = med(rows["callback"], "server_cpu_us_per_request")
print("| server | req/s | server CPU per call | vs callback no-op | "
      "context switches per call |")
print("|---|---|---|---|---|")
for key, label in names.items():
    runs = rows.get(key)
    if not runs:
        continue
    cpu = med(runs, "server_cpu_us_per_request")
    print(f"| {label} | {med(runs, 'requests_per_s'):,.0f} | {cpu:.1f} µs | "
          f"{cpu / base:.2f}× | "
          f"{med(runs, 'server_context_switches_per_request'):.2f} |")
EOF
