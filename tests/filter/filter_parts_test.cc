// ToParts / FromParts: a filter taken apart and rebuilt is the same filter
// (format-2 runs, legacy format-1 Bloom slices, and both in one user), and
// FromParts rejects malformed parts naming what is wrong.
#include "src/filter/filter_parts.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "src/filter/user_filter.h"
#include "tests/filter/arrival_patterns.h"

namespace exposure_filter::testing {
namespace {

// Same slices, same Bloom bits, same runs (codes, capacity, open).
void ExpectSameParts(const FilterParts& a, const FilterParts& b) {
  ASSERT_EQ(a.slices.size(), b.slices.size());
  for (size_t i = 0; i < a.slices.size(); ++i) {
    const SlicePart& sa = a.slices[i];
    const SlicePart& sb = b.slices[i];
    EXPECT_EQ(sa.index, sb.index);
    EXPECT_EQ(sa.min_event_ms, sb.min_event_ms);
    EXPECT_EQ(sa.max_event_ms, sb.max_event_ms);
    ASSERT_EQ(sa.bloom_segments.size(), sb.bloom_segments.size());
    for (size_t j = 0; j < sa.bloom_segments.size(); ++j) {
      const BloomSegment& ga = sa.bloom_segments[j];
      const BloomSegment& gb = sb.bloom_segments[j];
      EXPECT_EQ(ga.num_blocks(), gb.num_blocks());
      EXPECT_EQ(ga.k(), gb.k());
      EXPECT_EQ(ga.count(), gb.count());
      EXPECT_EQ(ga.capacity(), gb.capacity());
      EXPECT_EQ(std::memcmp(ga.words(), gb.words(), ga.bit_bytes()), 0)
          << "slice " << i << " segment " << j;
    }
    ASSERT_EQ(sa.runs.size(), sb.runs.size());
    for (size_t j = 0; j < sa.runs.size(); ++j) {
      EXPECT_TRUE(sa.runs[j].run == sb.runs[j].run)
          << "slice " << i << " run " << j;
      EXPECT_EQ(sa.runs[j].capacity, sb.runs[j].capacity);
      EXPECT_EQ(sa.runs[j].open, sb.runs[j].open);
    }
  }
}

UserFilter Format2User(uint64_t seed) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(seed);
  UserFilter f("surface/alice");
  // Sealed slices, an open one, late items: every kind of run.
  for (const Write& w : Writes(Pattern::kSpread20PerCall, rng)) {
    f.Record(p, w.hashes, w.event_ms);
  }
  f.Record(p, Hashes(rng, 30, false), kNow - 20 * kDay);
  return f;
}

TEST(FilterPartsTest, Format2FilterRoundTripsThroughParts) {
  const FilterPolicy p = DefaultPolicy();
  const UserFilter f = Format2User(15);
  const FilterParts parts = f.ToParts();
  ASSERT_GE(parts.slices.size(), 6u);
  bool open = false, sealed = false;
  for (const SlicePart& s : parts.slices) {
    EXPECT_TRUE(s.bloom_segments.empty());
    EXPECT_FALSE(s.runs.empty());
    for (const RunPart& r : s.runs) {
      EXPECT_LE(r.run.count(), r.capacity);
      (r.open ? open : sealed) = true;
    }
  }
  EXPECT_TRUE(open && sealed);
  absl::StatusOr<UserFilter> back =
      UserFilter::FromParts(p, f.ToParts(), "surface/alice");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->key(), "surface/alice");
  ExpectSameParts(parts, back->ToParts());
  EXPECT_EQ(back->MemoryBytes(), f.MemoryBytes());
  EXPECT_DOUBLE_EQ(back->FpBound(p, kNow), f.FpBound(p, kNow));
}

TEST(FilterPartsTest, LegacyBloomSlicesRoundTrip) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(16);
  BloomSlices old;
  for (int d = 25; d >= 0; d -= 4)
    old.Record(p, Hashes(rng, 40, false), kNow - d * kDay);
  old.Record(p, Hashes(rng, 3000, false), kNow);  // a grown slice
  absl::StatusOr<UserFilter> f = UserFilter::FromParts(p, old.ToParts(), "k");
  ASSERT_TRUE(f.ok()) << f.status();
  ExpectSameParts(old.ToParts(), f->ToParts());
  absl::StatusOr<UserFilter> again =
      UserFilter::FromParts(p, f->ToParts(), "k");
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameParts(f->ToParts(), again->ToParts());
}

TEST(FilterPartsTest, MixedLegacyAndRunsRoundTrip) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(17);
  BloomSlices old;
  old.Record(p, Hashes(rng, 200, false), kNow - 10 * kDay);
  old.Record(p, Hashes(rng, 200, false), kNow);
  absl::StatusOr<UserFilter> f = UserFilter::FromParts(p, old.ToParts(), "k");
  ASSERT_TRUE(f.ok()) << f.status();
  f->Record(p, Hashes(rng, 50, false), kNow);
  f->Record(p, Hashes(rng, 50, false), kNow - 20 * kDay);
  const FilterParts parts = f->ToParts();
  ASSERT_EQ(parts.slices.size(), 3u);
  EXPECT_FALSE(parts.slices[2].bloom_segments.empty());
  EXPECT_FALSE(parts.slices[2].runs.empty());
  absl::StatusOr<UserFilter> back = UserFilter::FromParts(p, f->ToParts(), "k");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameParts(parts, back->ToParts());
}

TEST(FilterPartsTest, EmptyFilterRoundTrips) {
  const FilterPolicy p = DefaultPolicy();
  UserFilter f("k");
  absl::StatusOr<UserFilter> back = UserFilter::FromParts(p, f.ToParts(), "k");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->empty());
}

FilterParts TwoSlices() {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(3);
  BloomSlices old;
  old.Record(p, Hashes(rng, 10, false), kNow - 10 * kDay);
  absl::StatusOr<UserFilter> f = UserFilter::FromParts(p, old.ToParts(), "");
  f->Record(p, Hashes(rng, 10, false), kNow);
  return f->ToParts();  // slice 0: Bloom, slice 1: one run
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
  parts.slices[1].runs.clear();
  ExpectRejected(std::move(parts), "slice 1: neither");
}

TEST(FilterPartsTest, RejectsBadSegmentFields) {
  FilterParts parts = TwoSlices();
  parts.slices[0].bloom_segments[0] = BloomSegment(1, 17, 10);
  ExpectRejected(std::move(parts), "slice 0 segment 0");
}

TEST(FilterPartsTest, RejectsARunOverItsCapacity) {
  FilterParts parts = TwoSlices();
  parts.slices[1].runs[0].capacity = parts.slices[1].runs[0].run.count() - 1;
  ExpectRejected(std::move(parts), "slice 1 run 0");
}

TEST(FilterPartsTest, RejectsRunsOverTheBudget) {
  FilterParts parts = TwoSlices();
  // 10 items in a universe of 500: F = 2% > delta.
  std::mt19937_64 rng(4);
  parts.slices[1].runs[0].run =
      *FingerprintRun::Build(Hashes(rng, 10, false), 17, 500);
  parts.slices[1].runs[0].capacity = 10;
  parts.slices[1].runs[0].open = false;
  ExpectRejected(std::move(parts), "union bound");
}

TEST(FilterPartsTest, RejectsAnOpenRunThatIsNoPrefixRun) {
  FilterParts parts = TwoSlices();
  std::mt19937_64 rng(5);
  parts.slices[1].runs[0].run =
      *FingerprintRun::Build(Hashes(rng, 10, false), 17, 100000);
  parts.slices[1].runs[0].capacity = 10;
  parts.slices[1].runs[0].open = true;
  ExpectRejected(std::move(parts), "open runs are prefix runs");
}

}  // namespace
}  // namespace exposure_filter::testing
