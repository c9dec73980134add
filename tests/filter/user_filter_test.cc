// Property tests for the time-sliced user filter. Fixed seeds: every run sees
// the same items, so a failure reproduces.
#include "src/filter/user_filter.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "exposure_filter/item_hash.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
// 2026-11-23T00:00:00Z, a slice boundary with 5-day slices would be chance.
constexpr int64_t kNow = 1795392000000LL + 3 * 3600 * 1000LL;

FilterPolicy DefaultPolicy() { return *FilterPolicy::Create({}); }

// Recorded ids have the top bit clear, fresh ids have it set: disjoint sets.
std::vector<uint64_t> Hashes(std::mt19937_64& rng, size_t n, bool fresh) {
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) {
    uint64_t id = rng() >> 1;
    if (fresh) id |= uint64_t{1} << 63;
    x = HashItemId(id);
  }
  return h;
}

double MeasuredFpRate(const UserFilter& f, const FilterPolicy& p, int64_t now,
                      std::mt19937_64& rng, size_t probes) {
  const std::vector<uint64_t> fresh = Hashes(rng, probes, /*fresh=*/true);
  std::vector<uint8_t> keep(probes, 1);
  f.RemoveExposed(p, now, fresh, keep.data());
  size_t fp = 0;
  for (uint8_t k : keep) fp += !k;
  return static_cast<double>(fp) / probes;
}

void ExpectAllContained(const UserFilter& f, const FilterPolicy& p,
                        int64_t now, const std::vector<uint64_t>& recorded) {
  std::vector<uint8_t> keep(recorded.size(), 1);
  f.RemoveExposed(p, now, recorded, keep.data());
  for (size_t i = 0; i < recorded.size(); ++i) {
    ASSERT_EQ(keep[i], 0) << "false negative at item " << i;
    ASSERT_TRUE(f.MayContain(p, now, recorded[i]));
  }
}

class VolumeTest : public testing::TestWithParam<int> {};

TEST_P(VolumeTest, NoFalseNegativesAndFpWithinDeltaAtOnce) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(GetParam());
  const std::vector<uint64_t> items = Hashes(rng, GetParam(), false);
  UserFilter f;
  f.Record(p, items, kNow);
  ExpectAllContained(f, p, kNow, items);
  EXPECT_LE(MeasuredFpRate(f, p, kNow, rng, 200000), p.fp_rate());
}

TEST_P(VolumeTest, NoFalseNegativesAndFpWithinDeltaOneByOne) {
  // One item per call: every growth step of the slice is exercised.
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(GetParam() + 1);
  const std::vector<uint64_t> items = Hashes(rng, GetParam(), false);
  UserFilter f;
  for (uint64_t h : items) f.Record(p, {&h, 1}, kNow);
  ExpectAllContained(f, p, kNow, items);
  EXPECT_LE(MeasuredFpRate(f, p, kNow, rng, 200000), p.fp_rate());
  EXPECT_LE(f.Stats(p, kNow).estimated_fp_rate, p.fp_rate());
}

TEST_P(VolumeTest, NoFalseNegativesAndFpWithinDeltaSpreadOverTheWindow) {
  // The same volume spread over every live slice of the 30-day window.
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(GetParam() + 2);
  const std::vector<uint64_t> items = Hashes(rng, GetParam(), false);
  UserFilter f;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t t = kNow - static_cast<int64_t>(i % 30) * kDay;
    f.Record(p, {&items[i], 1}, t);
  }
  ExpectAllContained(f, p, kNow, items);
  EXPECT_LE(f.Stats(p, kNow).slices, static_cast<uint32_t>(p.max_live_slices()));
  EXPECT_LE(MeasuredFpRate(f, p, kNow, rng, 200000), p.fp_rate());
}

INSTANTIATE_TEST_SUITE_P(Volumes, VolumeTest,
                         testing::Values(1, 10, 100, 1000, 2000, 10000, 50000));

TEST(UserFilterTest, SmallUsersCostOneBlock) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(7);
  UserFilter f;
  f.Record(p, Hashes(rng, 10, false), kNow);
  const UserFilterStats st = f.Stats(p, kNow);
  EXPECT_EQ(st.segments, 1u);
  EXPECT_EQ(st.slice_stats[0].bytes, 64u);
  // A 2,000-item filter at the same budget is ~50x larger.
  UserFilter big;
  big.Record(p, Hashes(rng, 2000, false), kNow);
  EXPECT_GT(big.MemoryBytes(), 20 * f.MemoryBytes() / 2);
}

TEST(UserFilterTest, SteadyUserGetsOneSegmentPerSlice) {
  // A user shown 300 items every 5 days: after the first slice, each new slice
  // is sized from the previous one and never needs to grow.
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(8);
  UserFilter f;
  int64_t t = kNow - 29 * kDay;
  for (int slice = 0; slice < 6; ++slice, t += 5 * kDay) {
    f.Record(p, Hashes(rng, 300, false), t);
  }
  const UserFilterStats st = f.Stats(p, t);
  for (size_t i = 1; i < st.slice_stats.size(); ++i) {
    EXPECT_EQ(st.slice_stats[i].segments, 1u) << "slice " << i;
  }
}

TEST(UserFilterTest, RecordingTwiceChangesNothing) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(9);
  const std::vector<uint64_t> items = Hashes(rng, 500, false);
  UserFilter f;
  // An item the filling slice already claims by a false positive (rate
  // <= delta_s, ~0.3 expected among 500) is not counted as new.
  const uint64_t first = f.Record(p, items, kNow);
  EXPECT_LE(first, 500u);
  EXPECT_GE(first, 497u);
  const size_t bytes = f.MemoryBytes();
  const uint64_t count = f.Stats(p, kNow).items;
  EXPECT_EQ(f.Record(p, items, kNow), 0u);
  EXPECT_EQ(f.MemoryBytes(), bytes);
  EXPECT_EQ(f.Stats(p, kNow).items, count);
}

TEST(UserFilterTest, AgingDropsExactlyTheSlicesPastTheWindow) {
  const FilterPolicy p = DefaultPolicy();
  const uint64_t old_item = HashItemId(1), new_item = HashItemId(2);
  UserFilter f;
  f.Record(p, {&old_item, 1}, kNow);
  f.Record(p, {&new_item, 1}, kNow + 10 * kDay);
  const int64_t old_slice_end = p.SliceEndMs(p.SliceIndexOf(kNow));
  // Remembered for at least the retention window...
  const int64_t last_live = old_slice_end + p.retention_ms() - 1;
  EXPECT_GE(last_live, kNow + p.retention_ms() - 1);
  EXPECT_TRUE(f.MayContain(p, last_live, old_item));
  EXPECT_EQ(f.DropExpired(p, last_live), 0);
  // ...and forgotten exactly when its slice ends + retention.
  const int64_t expiry = old_slice_end + p.retention_ms();
  EXPECT_LE(expiry, kNow + p.retention_ms() + p.slice_span_ms());
  EXPECT_FALSE(f.MayContain(p, expiry, old_item));
  EXPECT_TRUE(f.MayContain(p, expiry, new_item));
  EXPECT_EQ(f.DropExpired(p, expiry), 1);
  EXPECT_EQ(f.slices().size(), 1u);
  EXPECT_TRUE(f.MayContain(p, expiry, new_item));
  EXPECT_TRUE(f.HasLiveSlices(p, expiry));
  const int64_t all_gone =
      p.SliceEndMs(p.SliceIndexOf(kNow + 10 * kDay)) + p.retention_ms();
  EXPECT_FALSE(f.HasLiveSlices(p, all_gone));
  EXPECT_EQ(f.DropExpired(p, all_gone), 1);
  EXPECT_TRUE(f.slices().empty());
}

TEST(UserFilterTest, LateEventsLandInTheSliceOfTheirTime) {
  const FilterPolicy p = DefaultPolicy();
  const uint64_t late = HashItemId(3);
  UserFilter f;
  const uint64_t now_item = HashItemId(4);
  f.Record(p, {&now_item, 1}, kNow);
  f.Record(p, {&late, 1}, kNow - 20 * kDay);
  ASSERT_EQ(f.slices().size(), 2u);
  EXPECT_LT(f.slices()[0].index, f.slices()[1].index);  // kept sorted
  // The late item ages out with its own slice, before the newer one.
  const int64_t late_expiry =
      p.SliceEndMs(p.SliceIndexOf(kNow - 20 * kDay)) + p.retention_ms();
  EXPECT_TRUE(f.MayContain(p, late_expiry - 1, late));
  EXPECT_FALSE(f.MayContain(p, late_expiry, late));
  EXPECT_TRUE(f.MayContain(p, late_expiry, now_item));
}

TEST(UserFilterTest, EstimatedFpTracksMeasured) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(11);
  UserFilter f;
  f.Record(p, Hashes(rng, 5000, false), kNow);
  const double est = f.Stats(p, kNow).estimated_fp_rate;
  const double measured = MeasuredFpRate(f, p, kNow, rng, 400000);
  EXPECT_GT(est, 0);
  EXPECT_LT(measured, 2.5 * est);
  EXPECT_GT(measured, est / 2.5);
}

TEST(UserFilterTest, StatsDescribeTheLiveSlices) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(12);
  UserFilter f;
  f.Record(p, Hashes(rng, 100, false), kNow - 12 * kDay);
  f.Record(p, Hashes(rng, 50, false), kNow);
  const UserFilterStats st = f.Stats(p, kNow);
  EXPECT_EQ(st.slices, 2u);
  EXPECT_EQ(st.items, 150u);
  EXPECT_EQ(st.oldest_exposure_ms, kNow - 12 * kDay);
  EXPECT_EQ(st.newest_exposure_ms, kNow);
  EXPECT_EQ(st.expires_at_ms,
            p.SliceEndMs(p.SliceIndexOf(kNow - 12 * kDay)) + p.retention_ms());
  EXPECT_EQ(st.bytes, f.MemoryBytes());
  EXPECT_GE(st.slice_stats[0].capacity, 100u);
}

}  // namespace
}  // namespace exposure_filter
