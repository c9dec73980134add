#include "src/server/config/transport_tuning.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>

#include "src/server/config/malloc_tuning.h"

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

// The sanitizers replace malloc: mallopt and mallinfo2 are not theirs.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcMalloc = false;
#else
constexpr bool kGlibcMalloc = true;
#endif

TEST(MallocTuningTest, KeepsFreedMemoryAtTheHeapTop) {
  if (!kGlibcMalloc) GTEST_SKIP() << "malloc is the sanitizer's";
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
