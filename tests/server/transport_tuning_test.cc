#include "src/server/config/transport_tuning.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace exposure_filter
