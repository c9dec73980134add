#!/usr/bin/env bash
# One command for the charts in docs/img/ (issue 18): runs the benchmarks
# whose JSON they are drawn from, records what ran (provenance.json: the
# command, when, how long, the load average, the git commit), then draws
# them with bench/plot_figures.py. Re-run it whenever the figures change
# (e.g. after a filter-format change: `bash bench/figures.sh memory`).
#   bash bench/figures.sh                    # memory, compare, soak
#   bash bench/figures.sh memory             # only some of them
#   PLOT_ONLY=1 bash bench/figures.sh        # redraw from the last runs
# What runs:
#   memory   $BUILD/bench/memory_bench --benchmark_format=json (~1 min)
#   compare  bench/compare.sh with DURATION=$COMPARE_DURATION (8s) and
#            WARMUP=$COMPARE_WARMUP (2s) per run (~3 min)
#   soak     bench/soak.sh with DURATION=$SOAK_DURATION (10m), INTERVAL=
#            $SOAK_INTERVAL (1m), SKIP_BUILD=1 after compare's build
# Environment: BUILD (build-release, built Release by compare.sh/soak.sh;
# SKIP_BUILD=1 uses the binaries in $BUILD as they are), DATA
# ($BUILD/figures: the JSON kept for the next redraw), IMG (docs/img).
# Needs Debian's python3-matplotlib (installed here when missing, as root).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-release}
DATA=${DATA:-$BUILD/figures}
IMG=${IMG:-docs/img}
COMPARE_DURATION=${COMPARE_DURATION:-8s}
COMPARE_WARMUP=${COMPARE_WARMUP:-2s}
SOAK_DURATION=${SOAK_DURATION:-10m}
SOAK_INTERVAL=${SOAK_INTERVAL:-1m}
what=("$@")
((${#what[@]})) || what=(memory compare soak)

if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "figures: installing Debian's python3-matplotlib" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3-matplotlib
fi
mkdir -p "$DATA" "$IMG"

# provenance DEST COMMAND START_EPOCH START_LOAD
provenance() {
  local dest=$1 command=$2 start=$3 load0=$4
  local end load1 git
  end=$(date +%s)
  load1=$(cut -d' ' -f1 /proc/loadavg)
  git=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || git="$git+changes"
  /usr/bin/python3 - "$dest" "$command" "$start" "$end" "$load0" "$load1" "$git" <<'PY'
import json, sys, time
dest, command, start, end, load0, load1, git = sys.argv[1:]
fmt = lambda t: time.strftime("%Y-%m-%d %H:%M", time.gmtime(int(t)))
json.dump({"command": command, "started": fmt(start), "finished": fmt(end),
           "duration": "%d s" % (int(end) - int(start)),
           "load_average": "%s-%s" % tuple(sorted((load0, load1), key=float)),
           "git": git}, open(dest, "w"), indent=1)
PY
}

plot_args=()
for w in "${what[@]}"; do
  start=$(date +%s); load0=$(cut -d' ' -f1 /proc/loadavg)
  case $w in
    memory)
      if [[ ${PLOT_ONLY:-0} != 1 ]]; then
        if [[ ${SKIP_BUILD:-0} != 1 ]]; then
          scripts/setup.sh "$BUILD" -DCMAKE_BUILD_TYPE=Release -DEF_BUILD_TESTS=OFF
        fi
        # tcache off: chunks in glibc's per-thread cache would count as heap.
        GLIBC_TUNABLES=glibc.malloc.tcache_count=0 \
          "$BUILD/bench/memory_bench" --benchmark_format=json >"$DATA/memory.json"
        provenance "$DATA/memory.json.provenance.json" \
          "GLIBC_TUNABLES=glibc.malloc.tcache_count=0 $BUILD/bench/memory_bench --benchmark_format=json" "$start" "$load0"
      fi
      plot_args+=(--memory "$DATA/memory.json") ;;
    compare)
      if [[ ${PLOT_ONLY:-0} != 1 ]]; then
        DURATION=$COMPARE_DURATION WARMUP=$COMPARE_WARMUP BUILD=$BUILD \
          OUT="$DATA/compare" bash bench/compare.sh | tee "$DATA/compare.txt"
        provenance "$DATA/compare/provenance.json" \
          "DURATION=$COMPARE_DURATION WARMUP=$COMPARE_WARMUP bash bench/compare.sh" \
          "$start" "$load0"
      fi
      plot_args+=(--compare "$DATA/compare") ;;
    soak)
      if [[ ${PLOT_ONLY:-0} != 1 ]]; then
        # soak.sh exits 1 when the run fails its checks; the chart of a
        # failed run is still what happened (soak.md says FAIL and why).
        DURATION=$SOAK_DURATION INTERVAL=$SOAK_INTERVAL BUILD=$BUILD \
          SKIP_BUILD=${SKIP_BUILD:-0} OUT="$DATA/soak" bash bench/soak.sh || true
        provenance "$DATA/soak/provenance.json" \
          "DURATION=$SOAK_DURATION INTERVAL=$SOAK_INTERVAL bash bench/soak.sh" \
          "$start" "$load0"
      fi
      plot_args+=(--soak "$DATA/soak") ;;
    *) echo "usage: bench/figures.sh [memory] [compare] [soak]" >&2; exit 2 ;;
  esac
done
/usr/bin/python3 bench/plot_figures.py --out "$IMG" "${plot_args[@]}"
