#!/usr/bin/env bash
# One command for the side-by-side performance table (docs/performance.md):
# builds Release, starts the transport-ceiling server, the real server and a
# redis-server on 127.0.0.1, runs the same workloads against each back to
# back with exposure-filter-bench, stops them all and prints the table with
# ratios. Then the feed loop (exposure-filter-feed-bench: sessions of K
# requests, each check followed by its shown items written through one
# batching writer) for every recall mode and both Redis baselines, and its
# table (bench/feed_table.py). Bounded: ~12 runs of DURATION (+ WARMUP) plus
# one preload, then one run of FEED_DURATION (+ WARMUP + a preload) per
# system, K and thread count.
#   bash bench/compare.sh                  # defaults below
#   DURATION=20s USERS=1000 bash bench/compare.sh
#   PARTS=feed FEED_K=10 FEED_DURATION=5s bash bench/compare.sh
# Environment: DURATION (8s), WARMUP (2s), USERS (200), EXPOSURES (2000),
# CANDIDATES (5000), THREADS (2), INFLIGHT (4), BUILD (build-release: any
# Release build dir), OUT ($BUILD/compare), CEILING_PORT, SERVER_PORT,
# REDIS_PORT, ADMIN_PORT (50161..50164), PARTS ("classic feed": the
# workloads above, the feed loop), FEED_DURATION (DURATION), FEED_K
# ("1 10 50"), FEED_THREADS (2), FEED_SESSIONS (16 sessions at once per
# client thread), FEED_USERS (1000), FEED_BACKGROUND
# (1000 other users' writes per second), FEED_LINGER (0s: how long the
# writer holds a write for others to join its call), FEED_WIDE_THREADS (8: mode A on
# the stream and the Redis list again at K = 10 with this many threads;
# empty skips).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-2s}
USERS=${USERS:-200}
EXPOSURES=${EXPOSURES:-2000}
CANDIDATES=${CANDIDATES:-5000}
THREADS=${THREADS:-2}
INFLIGHT=${INFLIGHT:-4}
BUILD=${BUILD:-build-release}
OUT=${OUT:-$BUILD/compare}
CEILING_PORT=${CEILING_PORT:-50161}
SERVER_PORT=${SERVER_PORT:-50162}
REDIS_PORT=${REDIS_PORT:-50163}
ADMIN_PORT=${ADMIN_PORT:-50164}  # the real server's metrics port (not the default 9464)
PARTS=${PARTS:-classic feed}
FEED_DURATION=${FEED_DURATION:-$DURATION}
FEED_K=${FEED_K:-1 10 50}
FEED_THREADS=${FEED_THREADS:-2}
FEED_SESSIONS=${FEED_SESSIONS:-16}
FEED_USERS=${FEED_USERS:-1000}
FEED_BACKGROUND=${FEED_BACKGROUND:-1000}
FEED_LINGER=${FEED_LINGER:-0s}
FEED_WIDE_THREADS=${FEED_WIDE_THREADS-8}

if ! command -v redis-server >/dev/null; then
  echo "compare: installing redis-server"
  if [[ $(id -u) -ne 0 ]]; then echo "compare: run as root" >&2; exit 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server
fi
scripts/setup.sh "$BUILD" -DCMAKE_BUILD_TYPE=Release -DEF_BUILD_TESTS=OFF
mkdir -p "$OUT"
rm -f "$OUT"/*.json

BENCH_NAME=compare
# shellcheck source=bench/background_processes.sh
source bench/background_processes.sh

"$BUILD/bench/transport-ceiling-server" --listen="127.0.0.1:$CEILING_PORT" \
  2>"$OUT/ceiling.log" &
ceiling_pid=$!; pids+=("$ceiling_pid")
# The real server runs with its default durability (write-ahead log, fsync
# every second) in a fresh data directory under $OUT.
rm -rf "$OUT/data"
"$BUILD/src/server/exposure-filter-server" --listen="127.0.0.1:$SERVER_PORT" \
  --admin_listen="127.0.0.1:$ADMIN_PORT" \
  --data_dir="$OUT/data" --log_level=warn 2>"$OUT/server.log" &
server_pid=$!; pids+=("$server_pid")
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
  --protected-mode yes >"$OUT/redis.log" 2>&1 &
redis_pid=$!; pids+=("$redis_pid")
wait_port "$CEILING_PORT"; wait_port "$SERVER_PORT"; wait_port "$REDIS_PORT"

bench() {  # bench <name> <port> <pid> [flags...]
  local name=$1 port=$2 pid=$3; shift 3
  echo "compare: $name" >&2
  "$BUILD/bench/exposure-filter-bench" --json --name="$name" \
    --target="127.0.0.1:$port" --server_pid="$pid" --users="$USERS" \
    --exposures_per_user="$EXPOSURES" --candidates="$CANDIDATES" \
    --threads="$THREADS" --inflight="$INFLIGHT" --duration="$DURATION" \
    --warmup="$WARMUP" "$@" >"$OUT/$name.json"
}

# Preload once per backend: the real server keeps its users across runs.
classic() {
bench filter_mask.server "$SERVER_PORT" "$server_pid" --mix=filter
bench filter_mask.ceiling "$CEILING_PORT" "$ceiling_pid" --mix=filter --preload=false
bench filter_ids.server "$SERVER_PORT" "$server_pid" --mix=filter --result_mode=kept_ids --preload=false
bench filter_ids.ceiling "$CEILING_PORT" "$ceiling_pid" --mix=filter --result_mode=kept_ids --preload=false
bench pull.server "$SERVER_PORT" "$server_pid" --mix=get_filter --preload=false
bench pull.ceiling "$CEILING_PORT" "$ceiling_pid" --mix=get_filter --preload=false
bench pull.redis "$REDIS_PORT" "$redis_pid" --backend=redis --mix=filter
bench pull_cached.server "$SERVER_PORT" "$server_pid" --mix=get_filter_cached --preload=false
bench pull_cached.ceiling "$CEILING_PORT" "$ceiling_pid" --mix=get_filter_cached --preload=false
bench record.server "$SERVER_PORT" "$server_pid" --mix=record --preload=false
bench record.ceiling "$CEILING_PORT" "$ceiling_pid" --mix=record --preload=false
}

# feed <system> <K> <threads>: one feed-loop run. Each run preloads its own
# users (the loop's writes grow the users it checks), so every system starts
# from the same state.
feed() {
  local system=$1 k=$2 threads=$3 port=$SERVER_PORT pid=$server_pid
  if [[ $system == redis* ]]; then port=$REDIS_PORT pid=$redis_pid; fi
  local name="feed.k$k.t$threads.$system"
  echo "compare: $name" >&2
  "$BUILD/bench/exposure-filter-feed-bench" --system="$system" \
    --name="$name" --target="127.0.0.1:$port" --server_pid="$pid" \
    --user_prefix="$system-k$k-t$threads-u" --users="$FEED_USERS" \
    --exposures_per_user="$EXPOSURES" --candidates="$CANDIDATES" \
    --session_requests="$k" --threads="$threads" \
    --sessions_per_thread="$FEED_SESSIONS" \
    --background_users_per_s="$FEED_BACKGROUND" \
    --writer_linger="$FEED_LINGER" \
    --duration="$FEED_DURATION" --warmup="$WARMUP" >"$OUT/$name.json"
}

feed_loop() {
  for k in $FEED_K; do
    for system in session mode_a mode_b stream_a redis redis_cached; do
      feed "$system" "$k" "$FEED_THREADS"
    done
  done
  if [[ -n $FEED_WIDE_THREADS ]]; then
    for system in stream_a redis session; do
      feed "$system" 10 "$FEED_WIDE_THREADS"
    done
  fi
}

# The host's steal time over the feed loop (the share of this VM's CPU time
# the hypervisor gave to other guests): "cpu" line of /proc/stat, field 9.
steal_since() {
  head -1 /proc/stat | awk -v before="$1" '{
    split(before, a, " ")
    total = 0
    for (i = 2; i <= 9; i++) total += $i - a[i]
    printf "%.0f%%", (total > 0 ? 100 * ($9 - a[9]) / total : 0)
  }'
}

for part in $PARTS; do
  case $part in
    classic) classic ;;
    feed) feed_stat0=$(head -1 /proc/stat); feed_loop; feed_steal=$(steal_since "$feed_stat0") ;;
    *) echo "compare: unknown part $part (classic, feed)" >&2; exit 2 ;;
  esac
done

cleanup
trap - EXIT
if [[ " $PARTS " == *" classic "* ]]; then python3 bench/compare_table.py "$OUT"; fi
if [[ " $PARTS " == *" feed "* ]]; then
  echo
  echo "The feed loop: sessions of K requests, $CANDIDATES candidates each," \
    "$FEED_SESSIONS sessions at once per client thread," \
    "20 shown items written per request through one batching writer" \
    "(linger $FEED_LINGER)," \
    "$FEED_BACKGROUND other users' writes/s; load average $(cut -d' ' -f1-3 /proc/loadavg)," \
    "host steal $feed_steal over the loop"
  python3 bench/feed_table.py "$OUT"
fi
