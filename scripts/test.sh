#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (unit,
# in-process server and end-to-end tests) with ctest.
#   scripts/test.sh                 # the regular build, in ./build
#   scripts/test.sh address         # ASan + UBSan build, in ./build-asan
#   scripts/test.sh thread          # ThreadSanitizer build, in ./build-tsan
set -euo pipefail
cd "$(dirname "$0")/.."
# The sanitizer builds compile only what their suite runs (the ef_tests
# target: test binaries and the binaries the e2e tests start; no benchmarks,
# no tools); the regular build compiles everything, benchmarks included.
case "${1:-}" in
  "") build=build; args=(); targets="" ;;
  address) build=build-asan; args=(-DEF_SANITIZE=address -DEF_BUILD_BENCH=OFF)
    targets=ef_tests ;;
  thread) build=build-tsan; args=(-DEF_SANITIZE=thread -DEF_BUILD_BENCH=OFF)
    targets=ef_tests ;;
  *) echo "usage: scripts/test.sh [address|thread]" >&2; exit 2 ;;
esac
EF_BUILD_TARGETS=$targets scripts/setup.sh "$build" "${args[@]}"
# halt_on_error: a sanitizer report fails the test that triggered it.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
# The TSan build leaves out the tests that go through gRPC (Debian's gRPC is
# not TSan-instrumented) and the filter tests, which start no thread;
# tests/CMakeLists.txt (NOT_UNDER_TSAN, NO_THREADS, TSAN_FILTER) says which
# and why, so every test registered in a build runs here.
ctest --test-dir "$build" --output-on-failure -j2 --timeout 600
