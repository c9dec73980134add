#!/usr/bin/env bash
# Soak test: builds Release, starts the real server on 127.0.0.1
# with a temporary data dir, measures its capacity on the soak mix briefly,
# then drives the same mix (FilterRecalled, GetFilter pulls with if_version,
# RecordExposure, DeleteUser) at LOAD (70%) of that capacity for DURATION,
# sampling the server's RSS every RSS_EVERY seconds. Prints per-minute RSS,
# rate, p99 and errors by code, and fails (exit 1) unless
#   - no request failed (any status code) and no exposed item was missed,
#   - RSS ended flat: the mean and the max of the last minute's samples are
#     within RSS_TOLERANCE of the plateau, the mean of the second half's,
#   - the server exits 0 on SIGTERM afterwards.
#   bash bench/soak.sh                     # 10 minutes
#   DURATION=30s bash bench/soak.sh        # a smoke run
# Environment: DURATION (10m, any absl duration), LOAD (0.7), CAPACITY_FOR
# (15s), MIX (filter=5,get_filter_cached=2,record=2,delete=1), WRITERS (2000:
# users record/delete touch; few enough that deletes bound their memory
# within the first minutes), RSS_EVERY (5 s), INTERVAL (1m), RSS_TOLERANCE
# (0.05), BUILD (build-release), OUT ($BUILD/soak), PORT (50171), SKIP_BUILD
# (1: use the binaries in $BUILD as they are).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10m}
LOAD=${LOAD:-0.7}
CAPACITY_FOR=${CAPACITY_FOR:-15s}
MIX=${MIX:-filter=5,get_filter_cached=2,record=2,delete=1}
WRITERS=${WRITERS:-2000}
RSS_EVERY=${RSS_EVERY:-5}
INTERVAL=${INTERVAL:-1m}
RSS_TOLERANCE=${RSS_TOLERANCE:-0.05}
BUILD=${BUILD:-build-release}
OUT=${OUT:-$BUILD/soak}
PORT=${PORT:-50171}
# Load shape shared by the capacity probe and the soak itself.
LOADGEN_FLAGS=(--target="127.0.0.1:$PORT" --mix="$MIX" --users=200
  --exposures_per_user=2000 --candidates=5000 --threads=2 --inflight=4
  --record_users=50 --record_items=20 --writer_users="$WRITERS")

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/setup.sh "$BUILD" -DCMAKE_BUILD_TYPE=Release -DEF_BUILD_TESTS=OFF
  cmake --build "$BUILD" --target exposure-filter-server exposure-filter-bench
fi
SERVER="$BUILD/src/server/exposure-filter-server"
LOADGEN="$BUILD/bench/exposure-filter-bench"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/*.jsonl "$OUT"/*.json "$OUT"/rss.tsv "$OUT"/soak.md
DATA=$(mktemp -d "${TMPDIR:-/tmp}/ef_soak_data.XXXXXX")

server_pid=""
sampler_pid=""
cleanup() {
  [[ -n $sampler_pid ]] && kill "$sampler_pid" 2>/dev/null || true
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$DATA"
}
trap cleanup EXIT

# Snapshots every minute, so the plateau includes them (the default 10m
# would put the first one at the very end of a 10-minute soak).
"$SERVER" --listen="127.0.0.1:$PORT" --admin_listen= --data_dir="$DATA" \
  --snapshot_interval=1m --log_level=warn 2>"$OUT/server.log" &
server_pid=$!
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  sleep 0.1
done

echo "soak: measuring capacity for $CAPACITY_FOR (mix $MIX)" >&2
"$LOADGEN" "${LOADGEN_FLAGS[@]}" --json --name=capacity \
  --duration="$CAPACITY_FOR" --warmup=3s --server_pid="$server_pid" \
  >"$OUT/capacity.json"
RATE=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
if r["errors"]:
    sys.exit("soak: errors while measuring capacity: %s" % r["errors"])
print("%.0f" % (float(sys.argv[2]) * r["requests_per_s"]))' \
  "$OUT/capacity.json" "$LOAD")
echo "soak: capacity $(python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["requests_per_s"])' "$OUT/capacity.json") req/s; soaking at $RATE req/s for $DURATION" >&2

# RSS of the server every RSS_EVERY seconds: unix time, bytes.
(
  while kill -0 "$server_pid" 2>/dev/null; do
    kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status" 2>/dev/null || true)
    [[ -n $kb ]] && echo "$(date +%s.%N) $((kb * 1024))"
    sleep "$RSS_EVERY"
  done
) >"$OUT/rss.tsv" &
sampler_pid=$!

"$LOADGEN" "${LOADGEN_FLAGS[@]}" --json --name=soak --preload=false \
  --rate="$RATE" --duration="$DURATION" --warmup=2s \
  --report_interval="$INTERVAL" --server_pid="$server_pid" \
  >"$OUT/soak.jsonl" || true
kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=""

kill -TERM "$server_pid"
server_rc=0
wait "$server_pid" || server_rc=$?
server_pid=""

python3 - "$OUT" "$RATE" "$LOAD" "$RSS_TOLERANCE" "$server_rc" <<'EOF'
import json, sys
out, rate, load, tol, server_rc = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
capacity = json.load(open(out + "/capacity.json"))
lines = [json.loads(l) for l in open(out + "/soak.jsonl") if l.strip()]
intervals = [l for l in lines if "interval" in l]
summary = [l for l in lines if "interval" not in l]
rss = [tuple(map(float, l.split())) for l in open(out + "/rss.tsv") if l.strip()]
failures = []
if not summary or not intervals or len(rss) < 4:
    print("soak: the run produced no summary, intervals or RSS samples", file=sys.stderr)
    sys.exit(1)
summary = summary[-1]
mib = lambda b: b / 1048576.0
rows = ["| minute | req/s | p50 ms | p99 ms | errors | RSS MiB (max in minute) |",
        "|---:|---:|---:|---:|---|---:|"]
start = intervals[0]["unix_s"] - intervals[0]["seconds"]
for iv in intervals:
    lo, hi = iv["unix_s"] - iv["seconds"], iv["unix_s"]
    in_iv = [b for t, b in rss if lo <= t < hi]
    errs = ", ".join("%s %d" % kv for kv in sorted(iv["errors"].items())) or "0"
    rows.append("| %d | %.0f | %s | %s | %s | %s |" % (
        iv["interval"], iv["requests_per_s"],
        "%.2f" % (iv["p50_us"] / 1e3) if iv["p50_us"] is not None else "-",
        "%.2f" % (iv["p99_us"] / 1e3) if iv["p99_us"] is not None else "-",
        errs, "%.1f" % mib(max(in_iv)) if in_iv else "-"))
# Plateau: the mean RSS of the second half of the soak. Flat: the last
# minute's mean and max both within tol of it.
end = intervals[-1]["unix_s"]
soak = [(t, b) for t, b in rss if start <= t <= end]
second_half = [b for t, b in soak if t >= start + (end - start) / 2]
last_minute = [b for t, b in soak if t >= end - 60]
plateau = sum(second_half) / len(second_half)
last_mean = sum(last_minute) / len(last_minute)
last_max = max(last_minute)
drift = last_mean / plateau - 1
peak = last_max / plateau - 1
text = "\n".join([
    "capacity %.0f req/s (mix %s, %d s probe); soak at %.0f req/s (%.0f%%) for %.0f s" % (
        capacity["requests_per_s"], capacity["mix"], capacity["seconds"], rate, 100 * load,
        summary["seconds"]),
    "achieved %.0f req/s, p50 %.2f ms, p99 %.2f ms, %d requests, errors %s, false negatives %d" % (
        summary["requests_per_s"], summary["latency_us"]["p50"] / 1e3,
        summary["latency_us"]["p99"] / 1e3, summary["requests"],
        summary["errors"] or "none", summary["false_negatives"]),
    "RSS: first sample %.1f MiB, plateau (mean of second half) %.1f MiB, last minute mean %.1f MiB (%+.1f%%), max %.1f MiB (%+.1f%%); tolerance %.0f%%" % (
        mib(soak[0][1]), mib(plateau), mib(last_mean), 100 * drift, mib(last_max), 100 * peak, 100 * tol),
    "server exit code on SIGTERM: %d" % server_rc,
    "", *rows])
if summary["errors"] or any(iv["errors"] for iv in intervals):
    failures.append("requests failed: %s" % summary["errors"])
if summary["false_negatives"]:
    failures.append("%d exposed items were not filtered" % summary["false_negatives"])
if abs(drift) > tol or peak > tol:
    failures.append("RSS did not end flat within %.0f%% of its plateau" % (100 * tol))
if server_rc != 0:
    failures.append("server exited %d on SIGTERM" % server_rc)
text += "\n\n" + ("PASS" if not failures else "FAIL: " + "; ".join(failures)) + "\n"
open(out + "/soak.md", "w").write(text)
print(text)
sys.exit(1 if failures else 0)
EOF
