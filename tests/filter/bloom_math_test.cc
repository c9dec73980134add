#include "src/filter/bloom_math.h"

#include <cmath>

#include <gtest/gtest.h>

#include "src/filter/filter_policy.h"

namespace exposure_filter {
namespace {

TEST(BloomMathTest, EmptyFilterHasNoFalsePositives) {
  EXPECT_EQ(BlockedFpRate(0, 6), 0.0);
}

TEST(BloomMathTest, FpRateGrowsWithLoad) {
  double prev = 0;
  for (double load = 1; load < 200; load *= 1.5) {
    const double fp = BlockedFpRate(load, 6);
    EXPECT_GT(fp, prev);
    prev = fp;
  }
}

// Overloaded blocks (a saturated last segment, or a pulled filter claiming
// billions of items) report a rate near 1, not an underflowed 0, and the
// computation stays short and defined.
TEST(BloomMathTest, OverloadedBlocksApproachCertainty) {
  double previous = 0;
  for (double load : {100.0, 699.0, 701.0, 2000.0, 60000.0, 65536.0, 4.3e9}) {
    for (int k : {1, 8, 16}) {
      const double fp = BlockedFpRate(load, k);
      EXPECT_GT(fp, 0.1) << load << " k=" << k;
      EXPECT_LE(fp, 1.0) << load << " k=" << k;
    }
    const double fp1 = BlockedFpRate(load, 1);
    EXPECT_GE(fp1, previous) << load;
    previous = fp1;
  }
  // Continuous across the switch to the log-space start.
  EXPECT_NEAR(BlockedFpRate(699.999, 4), BlockedFpRate(700.0, 4), 1e-6);
  EXPECT_EQ(BlockedFpRate(1e9, 16), 1.0);
}

TEST(BloomMathTest, BlockedIsWorseThanClassicalAtTheSameBitsPerItem) {
  // Classical: (1 - e^(-k n/m))^k at 512/load bits per item.
  for (double load : {20.0, 50.0, 80.0}) {
    const int k = 6;
    const double classical = std::pow(1 - std::exp(-k * load / 512), k);
    EXPECT_GT(BlockedFpRate(load, k), classical);
    EXPECT_LT(BlockedFpRate(load, k), 2 * classical);
  }
}

TEST(BloomMathTest, SizingMeetsTargetAndIsNearTheInformationLimit) {
  for (double target : {0.1, 0.01, 0.001, 0.0001}) {
    const BlockSizing s = SizeForFpRate(target);
    EXPECT_LE(BlockedFpRate(s.max_items_per_block, s.k), target * 1.000001);
    const double bits_per_item = 512.0 / s.max_items_per_block;
    // Bloom optimum is 1.44 log2(1/delta); blocking costs a little more.
    const double optimum = 1.44 * std::log2(1 / target);
    EXPECT_GT(bits_per_item, optimum);
    EXPECT_LT(bits_per_item, optimum * 1.25) << "target " << target;
  }
}

TEST(BloomMathTest, CapacityAndBlocksRoundTrip) {
  const BlockSizing s = SizeForFpRate(0.001);
  for (uint64_t cap : {1ull, 10ull, 2000ull, 50000ull}) {
    const uint32_t blocks = BlocksForCapacity(cap, s);
    EXPECT_GE(CapacityOfBlocks(blocks, s), cap);
    if (blocks > 1) {
      EXPECT_LT(CapacityOfBlocks(blocks - 1, s), cap);
    }
  }
}

TEST(FilterPolicyTest, DefaultsGiveSevenLiveSlicesAndSplitTheBudget) {
  absl::StatusOr<FilterPolicy> p = FilterPolicy::Create({});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->max_live_slices(), 7);  // 30 days / 5 days + 1
  // (1 - delta_s)^L == 1 - delta
  EXPECT_NEAR(std::pow(1 - p->slice_fp_budget(), 7), 0.99, 1e-12);
  EXPECT_GE(p->min_capacity(), 10u);
}

TEST(FilterPolicyTest, RejectsBadGeometry) {
  FilterPolicyOptions o;
  o.fp_rate = 0;
  EXPECT_FALSE(FilterPolicy::Create(o).ok());
  o = {};
  o.slice_span = absl::Hours(24);  // 31 live slices
  absl::StatusOr<FilterPolicy> p = FilterPolicy::Create(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("slice_span"), absl::string_view::npos);
  o = {};
  o.retention = absl::Hours(1);  // shorter than a slice
  EXPECT_FALSE(FilterPolicy::Create(o).ok());
}

}  // namespace
}  // namespace exposure_filter
