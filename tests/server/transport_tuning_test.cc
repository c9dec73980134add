#include "src/server/config/transport_tuning.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>

#include "src/server/config/malloc_tuning.h"
#include "tests/common/environment_skip.h"

namespace exposure_filter {
namespace {

TEST(TransportTuningTest, DefaultsAreValid) {
  EXPECT_TRUE(TransportTuning{}.Validate().ok());
}

TEST(TransportTuningTest, FrameSizeOutsideHttp2RangeNamesTheFlag) {
  TransportTuning t;
  t.http2_max_frame_size = 1000;
  absl::Status s = t.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--http2_max_frame_size"),
            absl::string_view::npos);
  t.http2_max_frame_size = 1 << 24;
  EXPECT_FALSE(t.Validate().ok());
}

TEST(TransportTuningTest, ReadChunkBoundsMustBeOrdered) {
  TransportTuning t;
  t.tcp_min_read_chunk_size = t.tcp_read_chunk_size + 1;
  EXPECT_NE(t.Validate().message().find("--tcp_min_read_chunk_size"),
            absl::string_view::npos);
  t = TransportTuning{};
  t.tcp_max_read_chunk_size = t.tcp_read_chunk_size - 1;
  EXPECT_FALSE(t.Validate().ok());
  t = TransportTuning{};
  t.tcp_min_read_chunk_size = 0;
  EXPECT_FALSE(t.Validate().ok());
}

// Whether malloc is glibc's, whose settings ApplyMallocTuning changes: a
// block it hands out shows in mallinfo2. Under ASan mallinfo2 reads 0, and
// TSan's blocks are not glibc's at all.
bool GlibcMallocReportsHeap() {
  constexpr size_t kProbe = size_t{64} << 10;
  const size_t before = mallinfo2().uordblks;
  void* volatile p = std::malloc(kProbe);
  const size_t after = mallinfo2().uordblks;
  std::free(p);
  return after >= before + kProbe;
}

TEST(MallocTuningTest, KeepsFreedMemoryAtTheHeapTop) {
  if (!GlibcMallocReportsHeap()) GTEST_SKIP() << kSkipNoHeapFigures;
  ::unsetenv("GLIBC_TUNABLES");
  ASSERT_TRUE(ApplyMallocTuning());
  // 2 MiB is above glibc's default mmap threshold (128 KiB): untuned it
  // gets its own mapping and free() unmaps it. Tuned it comes from the
  // heap, and freeing it leaves it at the top (keepcost) instead of
  // trimming it back to the kernel.
  constexpr size_t kBlock = size_t{2} << 20;
  static_assert(kBlock < kMallocKeepBytes);
  void* volatile p = std::malloc(kBlock);
  ASSERT_NE(p, nullptr);
  std::free(p);
  EXPECT_GE(mallinfo2().keepcost, kBlock);
}

TEST(MallocTuningTest, LeavesAnOperatorsTunablesAlone) {
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072", 1);
  EXPECT_FALSE(ApplyMallocTuning());
  ::unsetenv("GLIBC_TUNABLES");
}

}  // namespace
}  // namespace exposure_filter
