#!/usr/bin/env bash
# What a mode A message on the Session stream costs the server, by the gRPC
# server API that runs the stream (docs/performance.md, "The feed loop"):
# session-api-probe on the callback API (as exposure-filter-server) and on
# the synchronous API, driven by the feed loop's mode A on the stream
# (exposure-filter-feed-bench --system=stream_a: 5,000 candidates a request,
# the shown items written through the batching writer). The probes answer
# from a hash set per user, the same work on both APIs. APIs alternate
# round by round; the table gives each one's median of the rounds.
#   bash bench/session_api_cost.sh
# Environment: ROUNDS (3), DURATION (5s), WARMUP (2s), THREADS (2),
# BUILD (build-release), OUT ($BUILD/session_api_cost), PORT (50191).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-2s}
THREADS=${THREADS:-2}
BUILD=${BUILD:-build-release}
OUT=${OUT:-$BUILD/session_api_cost}
PORT=${PORT:-50191}

scripts/setup.sh "$BUILD" -DCMAKE_BUILD_TYPE=Release -DEF_BUILD_TESTS=OFF
mkdir -p "$OUT"
rm -f "$OUT"/*.json

BENCH_NAME=session_api_cost
# shellcheck source=bench/background_processes.sh
source bench/background_processes.sh

for round in $(seq 1 "$ROUNDS"); do
  for api in callback sync; do
    "$BUILD/bench/session-api-probe" --api="$api" \
      --listen="127.0.0.1:$PORT" >"$OUT/$api.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$PORT"
    echo "session_api_cost: round $round, $api" >&2
    "$BUILD/bench/exposure-filter-feed-bench" --system=stream_a --name="$api" \
      --target="127.0.0.1:$PORT" --server_pid="$pid" --users=200 \
      --exposures_per_user=100 --threads="$THREADS" --duration="$DURATION" \
      --warmup="$WARMUP" >"$OUT/$api.$round.json"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
  done
done

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores," \
  "$ROUNDS rounds x $DURATION, $THREADS client threads"
/usr/bin/python3 - "$OUT" <<'PY'
import json, pathlib, statistics, sys
rows = {}
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(f.read_text())
    rows.setdefault(r["name"], []).append(r)
def med(runs, key):
    return statistics.median(r[key] for r in runs)
base = med(rows["callback"], "server_cpu_us_per_request")
print("| Session stream on | req/s | server CPU per request | vs callback | "
      "server CPU per request, each round |")
print("|---|---|---|---|---|")
for api in ("callback", "sync"):
    runs = rows[api]
    cpu = med(runs, "server_cpu_us_per_request")
    each = ", ".join(f"{r['server_cpu_us_per_request']:.0f}" for r in runs)
    print(f"| {api} API | {med(runs, 'requests_per_s'):,.0f} | {cpu:.1f} µs | "
          f"{cpu / base:.2f}× | {each} |")
PY
