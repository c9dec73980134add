// The documented environment skips: the only reasons a test may GTEST_SKIP.
//
// A skip that hides a broken check is a check that cannot fail (once,
// with a broken checksum, an ASSERT in SetUpTestSuite made gtest report the
// four golden-vector tests as skipped, and ctest counted zero failures). So
// the main() of every test binary (gtest_main.cc) fails any skip whose
// message does not start with one of these reasons, including the implicit
// skip of every test in a suite whose SetUpTestSuite failed. Add a reason
// only for something the machine lacks, never for a check that failed, and
// list it in README.md, "Testing".
#ifndef EXPOSURE_FILTER_TESTS_COMMON_ENVIRONMENT_SKIP_H_
#define EXPOSURE_FILTER_TESTS_COMMON_ENVIRONMENT_SKIP_H_

#include <string_view>

namespace exposure_filter {

// tests/filter/probe_kernel_test.cc: the AVX2 probe kernel on a CPU without
// AVX2 (the portable kernel is still tested).
inline constexpr char kSkipNoAvx2[] = "environment skip: CPU without AVX2";
// tests/server/cancellation_test.cc: mallinfo2() reads 0 under ASan, whose
// allocator replaces glibc's, so heap growth cannot be measured;
// tests/server/transport_tuning_test.cc (MallocTuningTest): glibc's heap
// settings have nothing to act on under ASan or TSan.
inline constexpr char kSkipNoHeapFigures[] =
    "environment skip: allocator reports no heap figures (ASan)";
// tests/server/disk_fault_server_test.cc: mounting a tmpfs needs root (and
// CAP_SYS_ADMIN in a container); the reason is followed by the error.
inline constexpr char kSkipNoTmpfs[] = "environment skip: tmpfs unavailable";
// tests/persist/file_prefetcher_test.cc: a file on a memory file system
// ($TMPDIR on tmpfs) never leaves the page cache, so prefetching it into
// the cache cannot be observed.
inline constexpr char kSkipNoPageCacheDrop[] =
    "environment skip: $TMPDIR keeps files in memory (tmpfs)";

inline constexpr std::string_view kEnvironmentSkips[] = {
    kSkipNoAvx2, kSkipNoHeapFigures, kSkipNoTmpfs, kSkipNoPageCacheDrop};

inline bool IsEnvironmentSkip(std::string_view message) {
  for (std::string_view reason : kEnvironmentSkips) {
    if (message.substr(0, reason.size()) == reason) return true;
  }
  return false;
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TESTS_COMMON_ENVIRONMENT_SKIP_H_
