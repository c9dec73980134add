#!/usr/bin/env bash
# Builds every libFuzzer target (fuzz/, clang + ASan + UBSan, in ./build-fuzz)
# and runs each for a short time from its checked-in seed corpus.
#   scripts/fuzz.sh [seconds-per-target] [target...]    (default 60 s, all)
# A crash, sanitizer report, leak or timeout fails the script; the input that
# did it is saved as build-fuzz/artifacts/<target>-crash-... (reproduce with
# `build-fuzz/fuzz/<target> <file>`). New coverage goes to
# build-fuzz/corpus/<target>/, never into the repository's fuzz/corpus/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true

EF_BUILD_TARGETS=ef_fuzzers scripts/setup.sh build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DEF_FUZZ=ON \
  -DEF_BUILD_TESTS=OFF -DEF_BUILD_BENCH=OFF

targets=("$@")
if ((${#targets[@]} == 0)); then
  for bin in build-fuzz/fuzz/*_fuzzer; do targets+=("$(basename "$bin")"); done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
mkdir -p build-fuzz/artifacts
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  seeds=()
  [[ -d fuzz/corpus/$t ]] && seeds=("fuzz/corpus/$t")
  log=build-fuzz/$t.log
  echo "fuzz: $t for ${seconds}s (seeds: ${seeds[*]:-none})"
  if ! "build-fuzz/fuzz/$t" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/artifacts/$t-" "$work" "${seeds[@]}" \
      >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $t FAILED (log: $log)" >&2
    exit 1
  fi
  # Last status line (coverage, features, corpus) and the final counters.
  grep -E '^#[0-9]+' "$log" | tail -n 1
  grep -E 'stat::(number_of_executed_units|peak_rss_mb)' "$log" || true
done
echo "fuzz: all targets passed"
