#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (unit,
# in-process server and end-to-end tests) with ctest.
#   scripts/test.sh                 # the regular build, in ./build
#   scripts/test.sh address         # ASan + UBSan build, in ./build-asan
#   scripts/test.sh thread          # ThreadSanitizer build, in ./build-tsan
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") build=build; args=() ;;
  address) build=build-asan; args=(-DEF_SANITIZE=address -DEF_BUILD_BENCH=OFF) ;;
  thread) build=build-tsan; args=(-DEF_SANITIZE=thread -DEF_BUILD_BENCH=OFF) ;;
  *) echo "usage: scripts/test.sh [address|thread]" >&2; exit 2 ;;
esac
scripts/setup.sh "$build" "${args[@]}"
# halt_on_error: a sanitizer report fails the test that triggered it.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
exclude=()
if [[ ${1:-} == thread ]]; then
  # Debian's absl and gRPC are not TSan-instrumented: absl::Mutex is invisible
  # to TSan, so tests whose threads synchronise only through it (the store
  # concurrency test) or through gRPC internals report false races. They run
  # in the regular and ASan builds; see the durability issue's note.
  exclude=(-E "StoreConcurrency|ExposureFilterServer|e2e_python|ClientAgainst|ClientWithout|FilterCacheAgainst|PulledFilterTest")
fi
ctest --test-dir "$build" --output-on-failure -j2 --timeout 600 "${exclude[@]}"
