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
  # Debian's gRPC is not TSan-instrumented: tests whose threads synchronise
  # through gRPC internals (the in-process server, the e2e runs of a TSan
  # server binary) report false races. They run in the regular and ASan
  # builds. The store and the persist layer lock with std::shared_mutex /
  # std::mutex (src/store/annotated_mutex.h), which TSan sees, so their
  # concurrency tests run here. The client tests that start an in-process
  # gRPC server or channel (issue 5) are skipped for the same reason, and
  # the cancellation storms of issue 8 (CancellationTest), the real-binary
  # overload flood (OverloadTest), the Kafka consumer tests with the
  # in-process server, the partitioned servers and the routing client's
  # channels (issue 7), and the dashboard test against a real binary
  # (deploy_dashboard, issue 18).
  exclude=(-E "deploy_dashboard|ExposureFilterServer|CancellationTest|e2e_python|e2e_crash_recovery|ClientAgainst|ClientWithout|FilterCacheAgainst|PulledFilterTest|DiskFaultServerTest|OverloadTest|KafkaIngestTest|OwnershipServerTest|RoutingClient")
fi
ctest --test-dir "$build" --output-on-failure -j2 --timeout 600 "${exclude[@]}"
