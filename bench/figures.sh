#!/usr/bin/env bash
# One command for the figures of docs/performance.md: runs the benchmarks,
# records what ran (a provenance.json beside each result: the command, when,
# how long, the load average, the git commit), then, from the same JSON,
#   - rewrites the headline table at the top of docs/performance.md
#     (bench/headline_table.py: every row names its commit and time), and
#   - redraws the charts in docs/img/ (bench/plot_figures.py: every chart's
#     footer names the same).
# Table and charts come from one set of files in one run, so they cannot
# disagree. Run it on a quiet machine (nothing else building), then commit
# docs/performance.md and docs/img/ together.
#   bash bench/figures.sh                    # memory, compare, feed, check, soak
#   bash bench/figures.sh memory check       # only some of them
#   PLOT_ONLY=1 bash bench/figures.sh        # redraw table and charts from
#                                            # the last runs' JSON in $DATA
# What runs (about 19 minutes in all):
#   memory   GLIBC_TUNABLES=glibc.malloc.tcache_count=0
#            $BUILD/bench/memory_bench --benchmark_format=json (~1 min):
#            the memory rows and docs/img/memory_per_user.png
#   compare  bench/compare.sh with DURATION=$COMPARE_DURATION (8s) and
#            WARMUP=$COMPARE_WARMUP (2s) per run (~3 min): the FilterRecalled,
#            GetFilter, Redis and RecordExposure rows and
#            docs/img/throughput_p99.png (PARTS=classic: the feed loop,
#            which has no headline row, is compare.sh's own)
#   feed     bench/compare.sh PARTS=feed with FEED_K="1 10", 2 client threads,
#            FEED_DURATION=$FEED_DURATION (5s) and WARMUP=$COMPARE_WARMUP per
#            run (~3 min): the feed-loop rows (the session stream against
#            the Redis block list at K = 10, against mode B at K = 1); the
#            whole feed table, K = 50 and 8 threads included, is
#            `PARTS=feed bash bench/compare.sh` (docs/performance.md)
#   check    $BUILD/bench/filter_bench, BM_RemoveExposedUser at 2,000 items in
#            1 and 7 slices, formats 1 and 2, median of 3 (~1 min): the
#            in-process check row
#   soak     bench/soak.sh with DURATION=$SOAK_DURATION (10m), INTERVAL=
#            $SOAK_INTERVAL (1m): docs/img/soak.png (docs/reliability.md)
# A part not run keeps its rows and charts as they are.
# Environment: BUILD (build-release, built Release here unless SKIP_BUILD=1),
# DATA ($BUILD/figures: the JSON kept for the next redraw), IMG (docs/img),
# DOC (docs/performance.md: the file holding the headline block).
# Needs: root for the first run (Debian packages: the build's, redis-server,
# python3-matplotlib), ports 50161..50164 and 50171 free on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-release}
DATA=${DATA:-$BUILD/figures}
IMG=${IMG:-docs/img}
DOC=${DOC:-docs/performance.md}
COMPARE_DURATION=${COMPARE_DURATION:-8s}
COMPARE_WARMUP=${COMPARE_WARMUP:-2s}
FEED_DURATION=${FEED_DURATION:-5s}
SOAK_DURATION=${SOAK_DURATION:-10m}
SOAK_INTERVAL=${SOAK_INTERVAL:-1m}
what=("$@")
((${#what[@]})) || what=(memory compare feed check soak)
for w in "${what[@]}"; do
  case $w in
    memory | compare | feed | check | soak) ;;
    *) echo "usage: bench/figures.sh [memory] [compare] [feed] [check] [soak]" >&2
       exit 2 ;;
  esac
done

if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "figures: installing Debian's python3-matplotlib" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3-matplotlib
fi
mkdir -p "$DATA" "$IMG"

# provenance DEST COMMAND START_EPOCH START_LOAD START_CPU_LINE
# START_CPU_LINE: the "cpu" line of /proc/stat when the part started; the
# record carries the host's steal time over the part (the share of
# this VM's CPU time the hypervisor gave to others): the machine's noise,
# which moves even same-run ratios when it is high.
provenance() {
  local dest=$1 command=$2 start=$3 load0=$4 stat0=$5
  local end load1 git stat1
  end=$(date +%s)
  load1=$(cut -d' ' -f1 /proc/loadavg)
  stat1=$(head -1 /proc/stat)
  git=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || git="$git+changes"
  /usr/bin/python3 - "$dest" "$command" "$start" "$end" "$load0" "$load1" "$git" \
    "$stat0" "$stat1" <<'PY'
import json, sys, time
dest, command, start, end, load0, load1, git, stat0, stat1 = sys.argv[1:]
fmt = lambda t: time.strftime("%Y-%m-%d %H:%M", time.gmtime(int(t)))
record = {"command": command, "started": fmt(start), "finished": fmt(end),
          "duration": "%d s" % (int(end) - int(start)),
          "load_average": "%s-%s" % tuple(sorted((load0, load1), key=float)),
          "git": git}
# cpu user nice system idle iowait irq softirq steal ...
a = [int(x) for x in stat0.split()[1:9]]
b = [int(x) for x in stat1.split()[1:9]]
total = sum(b) - sum(a)
if total > 0:
    record["steal"] = "%.0f%%" % (100.0 * (b[7] - a[7]) / total)
json.dump(record, open(dest, "w"), indent=1)
PY
}

# The micro-benchmarks need the Release build; compare.sh and soak.sh build
# it themselves (setup.sh: a no-op when it is up to date).
built=0
build_once() {
  if [[ ${SKIP_BUILD:-0} != 1 && $built == 0 ]]; then
    scripts/setup.sh "$BUILD" -DCMAKE_BUILD_TYPE=Release -DEF_BUILD_TESTS=OFF
    built=1
  fi
}

inputs=()
for w in "${what[@]}"; do
  start=$(date +%s); load0=$(cut -d' ' -f1 /proc/loadavg); stat0=$(head -1 /proc/stat)
  case $w in
    memory)
      if [[ ${PLOT_ONLY:-0} != 1 ]]; then
        build_once
        # tcache off: chunks in glibc's per-thread cache would count as heap.
        GLIBC_TUNABLES=glibc.malloc.tcache_count=0 \
          "$BUILD/bench/memory_bench" --benchmark_format=json >"$DATA/memory.json"
        provenance "$DATA/memory.json.provenance.json" \
          "GLIBC_TUNABLES=glibc.malloc.tcache_count=0 $BUILD/bench/memory_bench --benchmark_format=json" "$start" "$load0" "$stat0"
      fi
      inputs+=(--memory "$DATA/memory.json") ;;
    compare)
      if [[ ${PLOT_ONLY:-0} != 1 ]]; then
        PARTS=classic DURATION=$COMPARE_DURATION WARMUP=$COMPARE_WARMUP \
          BUILD=$BUILD OUT="$DATA/compare" bash bench/compare.sh |
          tee "$DATA/compare.txt"
        built=1
        provenance "$DATA/compare/provenance.json" \
          "PARTS=classic DURATION=$COMPARE_DURATION WARMUP=$COMPARE_WARMUP bash bench/compare.sh" \
          "$start" "$load0" "$stat0"
      fi
      inputs+=(--compare "$DATA/compare") ;;
    feed)
      if [[ ${PLOT_ONLY:-0} != 1 ]]; then
        PARTS=feed FEED_K="1 10" FEED_WIDE_THREADS= FEED_DURATION=$FEED_DURATION \
          WARMUP=$COMPARE_WARMUP BUILD=$BUILD \
          OUT="$DATA/feed" bash bench/compare.sh | tee "$DATA/feed.txt"
        built=1
        provenance "$DATA/feed/provenance.json" \
          "PARTS=feed FEED_K=\"1 10\" FEED_WIDE_THREADS= FEED_DURATION=$FEED_DURATION WARMUP=$COMPARE_WARMUP bash bench/compare.sh" \
          "$start" "$load0" "$stat0"
      fi
      inputs+=(--feed "$DATA/feed") ;;
    check)
      if [[ ${PLOT_ONLY:-0} != 1 ]]; then
        build_once
        check_cmd=("$BUILD/bench/filter_bench"
          "--benchmark_filter=BM_RemoveExposedUser/[17]/2000/[12]\$"
          --benchmark_min_time=0.5 --benchmark_repetitions=3
          --benchmark_report_aggregates_only=true --benchmark_format=json)
        "${check_cmd[@]}" >"$DATA/check.json"
        provenance "$DATA/check.json.provenance.json" "${check_cmd[*]}" \
          "$start" "$load0" "$stat0"
      fi
      inputs+=(--check "$DATA/check.json") ;;
    soak)
      if [[ ${PLOT_ONLY:-0} != 1 ]]; then
        # soak.sh exits 1 when the run fails its checks; the chart of a
        # failed run is still what happened (soak.md says FAIL and why).
        DURATION=$SOAK_DURATION INTERVAL=$SOAK_INTERVAL BUILD=$BUILD \
          SKIP_BUILD=$(( built || ${SKIP_BUILD:-0} )) OUT="$DATA/soak" \
          bash bench/soak.sh || true
        built=1
        provenance "$DATA/soak/provenance.json" \
          "DURATION=$SOAK_DURATION INTERVAL=$SOAK_INTERVAL bash bench/soak.sh" \
          "$start" "$load0" "$stat0"
      fi
      inputs+=(--soak "$DATA/soak") ;;
  esac
done

# The charts take --memory, --compare, --soak; the table --memory,
# --compare, --check: each its share of the same inputs.
plot_args=() table_args=()
for ((i = 0; i < ${#inputs[@]}; i += 2)); do
  flag=${inputs[i]} path=${inputs[i + 1]}
  if [[ $flag != --check && $flag != --feed ]]; then plot_args+=("$flag" "$path"); fi
  if [[ $flag != --soak ]]; then table_args+=("$flag" "$path"); fi
done
if ((${#plot_args[@]})); then
  /usr/bin/python3 bench/plot_figures.py --out "$IMG" "${plot_args[@]}"
fi
if ((${#table_args[@]})); then
  /usr/bin/python3 bench/headline_table.py --doc "$DOC" "${table_args[@]}"
fi
