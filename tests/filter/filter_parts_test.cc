// ToParts / FromParts: a filter taken apart and rebuilt is the same filter,
// and FromParts rejects malformed parts naming what is wrong.
#include "src/filter/filter_parts.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "exposure_filter/item_hash.h"
#include "src/filter/user_filter.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
constexpr int64_t kNow = 1795392000000LL + 3 * 3600 * 1000LL;

FilterPolicy DefaultPolicy() { return *FilterPolicy::Create({}); }

std::vector<uint64_t> Hashes(std::mt19937_64& rng, size_t n) {
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) x = HashItemId(rng());
  return h;
}

// Same slices, same segments, same bits.
void ExpectSameFilter(const UserFilter& a, const UserFilter& b) {
  ASSERT_EQ(a.slices().size(), b.slices().size());
  for (size_t i = 0; i < a.slices().size(); ++i) {
    const UserFilter::Slice sa = a.slices()[i];
    const UserFilter::Slice sb = b.slices()[i];
    EXPECT_EQ(sa.index, sb.index);
    EXPECT_EQ(sa.min_event_ms, sb.min_event_ms);
    EXPECT_EQ(sa.max_event_ms, sb.max_event_ms);
    ASSERT_EQ(sa.segments.size(), sb.segments.size());
    for (size_t j = 0; j < sa.segments.size(); ++j) {
      const UserFilter::Segment ga = sa.segments[j];
      const UserFilter::Segment gb = sb.segments[j];
      EXPECT_EQ(ga.num_blocks(), gb.num_blocks());
      EXPECT_EQ(ga.k(), gb.k());
      EXPECT_EQ(ga.count(), gb.count());
      EXPECT_EQ(ga.capacity(), gb.capacity());
      EXPECT_EQ(std::memcmp(ga.words(), gb.words(), ga.bit_bytes()), 0)
          << "slice " << i << " segment " << j;
    }
  }
}

TEST(FilterPartsTest, BloomFilterRoundTripsThroughParts) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(15);
  UserFilter f("surface/alice");
  // Several slices, one of them grown past its first segment.
  for (int d = 0; d < 25; d += 4) {
    f.Record(p, Hashes(rng, 40), kNow - d * kDay);
  }
  f.Record(p, Hashes(rng, 3000), kNow);
  const FilterParts parts = f.ToParts();
  ASSERT_EQ(parts.slices.size(), f.slices().size());
  for (const SlicePart& s : parts.slices) {
    EXPECT_FALSE(s.bloom_segments.empty());
    EXPECT_TRUE(s.runs.empty());
  }
  absl::StatusOr<UserFilter> back =
      UserFilter::FromParts(p, f.ToParts(), "surface/alice");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->key(), "surface/alice");
  ExpectSameFilter(f, *back);
  EXPECT_EQ(back->MemoryBytes(), f.MemoryBytes());
}

TEST(FilterPartsTest, EmptyFilterRoundTrips) {
  const FilterPolicy p = DefaultPolicy();
  UserFilter f("k");
  absl::StatusOr<UserFilter> back = UserFilter::FromParts(p, f.ToParts(), "k");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->slices().empty());
}

FilterParts TwoSlices() {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(3);
  UserFilter f;
  f.Record(p, Hashes(rng, 10), kNow - 10 * kDay);
  f.Record(p, Hashes(rng, 10), kNow);
  return f.ToParts();
}

void ExpectRejected(FilterParts parts, absl::string_view needle) {
  absl::StatusOr<UserFilter> f =
      UserFilter::FromParts(DefaultPolicy(), std::move(parts), "k");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find(needle), absl::string_view::npos)
      << f.status();
}

TEST(FilterPartsTest, RejectsSlicesOutOfOrder) {
  FilterParts parts = TwoSlices();
  std::swap(parts.slices[0], parts.slices[1]);
  ExpectRejected(std::move(parts), "ascending");
}

TEST(FilterPartsTest, RejectsDuplicateSliceIndex) {
  FilterParts parts = TwoSlices();
  parts.slices[1].index = parts.slices[0].index;
  ExpectRejected(std::move(parts), "slice 1: index");
}

TEST(FilterPartsTest, RejectsInvertedEventTimes) {
  FilterParts parts = TwoSlices();
  parts.slices[0].min_event_ms = parts.slices[0].max_event_ms + 1;
  ExpectRejected(std::move(parts), "slice 0: min_event_ms");
}

TEST(FilterPartsTest, RejectsASliceWithoutContent) {
  FilterParts parts = TwoSlices();
  parts.slices[1].bloom_segments.clear();
  ExpectRejected(std::move(parts), "slice 1: bloom_segments");
}

TEST(FilterPartsTest, RejectsBadSegmentFields) {
  FilterParts parts = TwoSlices();
  parts.slices[0].bloom_segments[0] = BloomSegment(1, 17, 10);
  ExpectRejected(std::move(parts), "slice 0 segment 0");
}

}  // namespace
}  // namespace exposure_filter
