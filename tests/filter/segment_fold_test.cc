// Folding and sealing: a segment folded by an integer factor keeps every item
// (zero false negatives), its measured FP is what FoldedFpRate predicted, and
// a slice sealed after a burst gives bytes back while the filter stays within
// its FP target.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "exposure_filter/item_hash.h"
#include "src/filter/bloom_segment.h"
#include "src/filter/bloom_slices.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
constexpr int64_t kNow = 1795392000000LL + 3 * 3600 * 1000LL;

std::vector<uint64_t> RandomHashes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) x = HashItemId(rng());
  return h;
}

TEST(SegmentFoldTest, FoldKeepsEveryItemAndMatchesPredictedFpRate) {
  for (uint32_t factor : {2u, 3u, 4u, 12u}) {
    BloomSegment seg(48, 9, 10000);
    const std::vector<uint64_t> items = RandomHashes(300, factor);
    for (uint64_t h : items) seg.Add(h);
    const double predicted = seg.FoldedFpRate(factor);
    EXPECT_GE(predicted, seg.MeasuredFpRate());
    seg.Fold(factor);
    EXPECT_EQ(seg.num_blocks(), 48 / factor);
    EXPECT_DOUBLE_EQ(seg.MeasuredFpRate(), predicted);
    EXPECT_TRUE(seg.full()) << "a folded segment takes no more items";
    for (uint64_t h : items)
      ASSERT_TRUE(seg.MayContain(h)) << "factor " << factor;
  }
}

TEST(SegmentFoldTest, MeasuredFpRateMatchesFreshProbes) {
  BloomSegment seg(64, 8, 100000);
  for (uint64_t h : RandomHashes(3000, 1)) seg.Add(h);
  const std::vector<uint64_t> fresh = RandomHashes(400000, 2);
  size_t fp = 0;
  for (uint64_t h : fresh) fp += seg.MayContain(h);
  const double measured = static_cast<double>(fp) / fresh.size();
  // ~2,000+ expected hits: 4 sigma is well under 10%.
  EXPECT_NEAR(measured, seg.MeasuredFpRate(), seg.MeasuredFpRate() * 0.1);
}

// A slice that took a burst grew a 4x growth segment; when the next slice
// opens, sealing folds it and the user's bytes drop, with no false negative
// and the FP target kept.
TEST(SegmentFoldTest, SealingFoldsAnOverSizedGrowthSegment) {
  const FilterPolicy policy = *FilterPolicy::Create({});
  BloomSlices f;
  const std::vector<uint64_t> items = RandomHashes(1200, 3);
  const int64_t old_slice = kNow - 6 * kDay;
  // 1,000 items opened the slice, then a burst of 200 more overflowed it.
  f.Record(policy, {items.data(), 1000}, old_slice);
  for (size_t i = 1000; i < items.size(); ++i) {
    f.Record(policy, {&items[i], 1}, old_slice);
  }
  ASSERT_GE(f.slices().front().segments.size(), 2u);
  const size_t before = f.MemoryBytes();
  const std::vector<uint64_t> newer = RandomHashes(10, 4);
  f.Record(policy, newer, kNow);
  const size_t newer_bytes = kBlockBytes;  // one block for 10 items
  EXPECT_LT(f.MemoryBytes(), before + newer_bytes) << "sealing freed bytes";
  std::vector<uint8_t> keep(items.size(), 1);
  f.RemoveExposed(policy, kNow, items, keep.data());
  for (size_t i = 0; i < keep.size(); ++i) ASSERT_EQ(keep[i], 0) << i;
  // Sealing folds while the sealed slice's FP, measured from its bits, stays
  // within its share minus the growth reserve; the newer slice (10 items in
  // one block) adds ~1e-7. 1M probes expect <= 1,256 hits at that budget
  // (sd 35), so 1.2x the budget is > 7 sd above (fp_budget_test.cc derives
  // the 1.2).
  const double budget =
      policy.slice_fp_budget() - policy.GrowthReserve(static_cast<int>(
                                     f.slices().front().segments.size()));
  const std::vector<uint64_t> fresh = RandomHashes(1000000, 5);
  std::vector<uint8_t> fresh_keep(fresh.size(), 1);
  f.RemoveExposed(policy, kNow, fresh, fresh_keep.data());
  size_t fp = 0;
  for (uint8_t k : fresh_keep) fp += !k;
  EXPECT_LE(static_cast<double>(fp) / fresh.size(), 1.2 * budget)
      << fp << " of " << fresh.size()
      << " fresh probes claimed: the sealed slice exceeds its FP share minus "
         "the growth reserve";
}

}  // namespace
}  // namespace exposure_filter
