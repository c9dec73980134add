// The frame every log and snapshot record is wrapped in: round trip, and how
// damage is classified (torn tail vs corruption).
#include "src/persist/record_frame.h"

#include <string>

#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

std::string Frames(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    AppendFrame(static_cast<uint8_t>(1 + i % 3), std::string(10 + i, 'a' + i),
                &out);
  }
  return out;
}

TEST(RecordFrameTest, RoundTripsTypeAndBody) {
  std::string data;
  AppendFrame(7, "hello", &data);
  AppendFrame(9, "", &data);
  Frame f;
  ASSERT_EQ(ParseFrame(data, &f), FrameParse::kOk);
  EXPECT_EQ(f.type, 7);
  EXPECT_EQ(f.body, "hello");
  EXPECT_EQ(f.size, kFrameHeaderBytes + 6);
  ASSERT_EQ(ParseFrame(absl::string_view(data).substr(f.size), &f),
            FrameParse::kOk);
  EXPECT_EQ(f.type, 9);
  EXPECT_EQ(f.body, "");
  EXPECT_EQ(ParseFrame(absl::string_view(data).substr(data.size()), &f),
            FrameParse::kEnd);
}

TEST(RecordFrameTest, EveryTruncationOfTheLastFrameIsTorn) {
  const std::string data = Frames(3);
  Frame f;
  ASSERT_EQ(ParseFrame(data, &f), FrameParse::kOk);
  const size_t last = data.size() - (kFrameHeaderBytes + 1 + 12);
  for (size_t cut = last + 1; cut < data.size(); ++cut) {
    EXPECT_EQ(ParseFrame(absl::string_view(data).substr(last, cut - last), &f),
              FrameParse::kTorn)
        << "cut at " << cut;
  }
}

TEST(RecordFrameTest, EveryBitFlipWithDataAfterItIsCorruption) {
  const std::string clean = Frames(2);
  Frame first;
  ASSERT_EQ(ParseFrame(clean, &first), FrameParse::kOk);
  for (size_t byte = 0; byte < first.size; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string data = clean;
      data[byte] = static_cast<char>(data[byte] ^ (1 << bit));
      Frame f;
      EXPECT_EQ(ParseFrame(data, &f), FrameParse::kCorrupt)
          << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(RecordFrameTest, ABadChecksumOnTheVeryLastFrameIsTorn) {
  std::string data = Frames(1);
  data.back() = static_cast<char>(data.back() ^ 1);
  Frame f;
  EXPECT_EQ(ParseFrame(data, &f), FrameParse::kTorn);
}

TEST(RecordFrameTest, ZeroFilledTailIsTorn) {
  Frame f;
  EXPECT_EQ(ParseFrame(std::string(100, '\0'), &f), FrameParse::kTorn);
  EXPECT_EQ(ParseFrame(std::string(5, '\0'), &f), FrameParse::kTorn);
}

TEST(RecordFrameTest, AbsurdLengthIsCorruptionNotAnAllocation) {
  std::string data = Frames(2);
  data[3] = static_cast<char>(0x7f);  // length ~2 GiB, length check fails
  Frame f;
  EXPECT_EQ(ParseFrame(data, &f), FrameParse::kCorrupt);
}

}  // namespace
}  // namespace exposure_filter
