#!/usr/bin/env bash
# The previous release and this build side by side in one run, against the
# transport ceiling: does a change keep FilterRecalled's req/s and p99 (and
# the other workloads')? Starts three servers on 127.0.0.1 — the no-op
# transport-ceiling server, this build's exposure-filter-server and
# OLD_BUILD's — and sends each the same workloads with this build's
# exposure-filter-bench, as bench/compare.sh does. ROUNDS rounds; within a
# round the order rotates (new, old, ceiling; old, ceiling, new; ceiling,
# new, old; ...) so slow drift of the shared machine's load falls on every
# server alike. The 1-minute load average is recorded before every run.
# Prints every run, then per workload the medians over rounds.
#   OLD_BUILD=../ef-old/build-release bash bench/compare_releases.sh
# A Release build of the commit to compare against, e.g. 187ed21 (the last
# release that stored filter format 1), from a clone beside this one:
#   git clone -q . ../ef-old && git -C ../ef-old checkout -q 187ed21
#   (cd ../ef-old && bash scripts/setup.sh build-release \
#     -DCMAKE_BUILD_TYPE=Release -DEF_BUILD_TESTS=OFF)
# Environment: OLD_BUILD (required: a Release build dir of the other commit
# holding src/server/exposure-filter-server), BUILD (build-release), ROUNDS
# (3), WORKLOADS ("filter_mask filter_ids"; also "pull", "record", and
# "filter_unfiltered": filter_mask's requests for a surface nobody recorded,
# which the real servers answer with no filter work at all: the service's
# own per-request cost beside the ceiling's),
# DURATION (8s), WARMUP (2s), USERS (200), EXPOSURES (2000), CANDIDATES
# (5000), THREADS (2), INFLIGHT (4), OUT ($BUILD/compare_releases), ports
# 50171..50175, RATE (0 = as fast as they answer; a total req/s below
# every server's saturation offers each the same load; their CPU per
# request then includes the wake-ups of an unsaturated server, about twice
# the saturated figure: docs/performance.md, "How each workload is
# measured").
set -euo pipefail
cd "$(dirname "$0")/.."

: "${OLD_BUILD:?set OLD_BUILD to a Release build dir of the previous main}"
BUILD=${BUILD:-build-release}
ROUNDS=${ROUNDS:-3}
WORKLOADS=${WORKLOADS:-filter_mask filter_ids}
DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-2s}
USERS=${USERS:-200}
EXPOSURES=${EXPOSURES:-2000}
CANDIDATES=${CANDIDATES:-5000}
THREADS=${THREADS:-2}
INFLIGHT=${INFLIGHT:-4}
RATE=${RATE:-0}
OUT=${OUT:-$BUILD/compare_releases}
CEILING_PORT=${CEILING_PORT:-50171}
NEW_PORT=${NEW_PORT:-50172}
OLD_PORT=${OLD_PORT:-50173}
NEW_ADMIN_PORT=${NEW_ADMIN_PORT:-50174}
OLD_ADMIN_PORT=${OLD_ADMIN_PORT:-50175}

old_server="$OLD_BUILD/src/server/exposure-filter-server"
[[ -x $old_server ]] || { echo "compare_releases: no $old_server" >&2; exit 1; }
EF_BUILD_TARGETS="exposure-filter-server transport-ceiling-server exposure-filter-bench" \
  scripts/setup.sh "$BUILD" -DCMAKE_BUILD_TYPE=Release
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT/loadavg.txt"

BENCH_NAME=compare_releases
# shellcheck source=bench/background_processes.sh
source bench/background_processes.sh

"$BUILD/bench/transport-ceiling-server" --listen="127.0.0.1:$CEILING_PORT" \
  2>"$OUT/ceiling.log" &
pids+=($!); declare -A pid_of=([ceiling]=$!) port_of=([ceiling]=$CEILING_PORT)
# Both real servers with their default durability (write-ahead log, fsync
# every second) in fresh data directories, as compare.sh.
rm -rf "$OUT/data.new" "$OUT/data.old"
"$BUILD/src/server/exposure-filter-server" --listen="127.0.0.1:$NEW_PORT" \
  --admin_listen="127.0.0.1:$NEW_ADMIN_PORT" --data_dir="$OUT/data.new" \
  --log_level=warn 2>"$OUT/server.new.log" &
pids+=($!); pid_of[new]=$!; port_of[new]=$NEW_PORT
"$old_server" --listen="127.0.0.1:$OLD_PORT" \
  --admin_listen="127.0.0.1:$OLD_ADMIN_PORT" --data_dir="$OUT/data.old" \
  --log_level=warn 2>"$OUT/server.old.log" &
pids+=($!); pid_of[old]=$!; port_of[old]=$OLD_PORT
wait_port "$CEILING_PORT"; wait_port "$NEW_PORT"; wait_port "$OLD_PORT"

flags_of() {  # the loadgen flags of a workload
  case $1 in
    filter_mask) echo "--mix=filter" ;;
    filter_ids) echo "--mix=filter --result_mode=kept_ids" ;;
    # Unknown surface: no hashing, no store lookup (every candidate kept;
    # the load generator counts the exposed ones as false negatives).
    filter_unfiltered) echo "--mix=filter --surface=unfiltered" ;;
    pull) echo "--mix=get_filter" ;;
    record) echo "--mix=record" ;;  # 50 users x 20 items per call
    *) echo "compare_releases: unknown workload $1" >&2; exit 1 ;;
  esac
}

declare -A preloaded=([ceiling]=1)
order=(new old ceiling)
for round in $(seq "$ROUNDS"); do
  for w in $WORKLOADS; do
    for who in "${order[@]}"; do
      name="$w.$who.r$round"
      preload=false
      # The unfiltered workload's surface is not the preloaded one.
      if [[ $w != filter_unfiltered && -z ${preloaded[$who]:-} ]]; then
        preload=true
        preloaded[$who]=1
      fi
      load=$(cut -d' ' -f1 /proc/loadavg)
      echo "$name $load" >>"$OUT/loadavg.txt"
      echo "compare_releases: $name (load average $load)" >&2
      # shellcheck disable=SC2046  # the workload's flags split on purpose
      "$BUILD/bench/exposure-filter-bench" --json --name="$name" \
        --target="127.0.0.1:${port_of[$who]}" --server_pid="${pid_of[$who]}" \
        --users="$USERS" --exposures_per_user="$EXPOSURES" \
        --candidates="$CANDIDATES" --threads="$THREADS" \
        --inflight="$INFLIGHT" --duration="$DURATION" --warmup="$WARMUP" \
        --rate="$RATE" --preload="$preload" $(flags_of "$w") >"$OUT/$name.json"
    done
  done
  order=("${order[@]:1}" "${order[0]}")  # rotate for the next round
done

cleanup
trap - EXIT
python3 bench/compare_releases_table.py "$OUT"
