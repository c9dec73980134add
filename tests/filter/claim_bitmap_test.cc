// ClaimBitmap (the bit sets RemoveClaimedByRuns checks a user's usual runs
// with) must clear exactly the candidates some run contains for every
// geometry it takes: prefix and other universes, precisions from 1 to 32,
// tiny universes, empty and one-code runs, more runs than one pass probes,
// and a bitmap reused after other runs (left all zero by each call).
// RemoveClaimedByRuns must agree on both of its ways, the bitmap and the
// index, which the cost model picks as documented.
#include "src/filter/claim_bitmap.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/filter/claim_cost.h"
#include "src/filter/claim_index.h"
#include "src/filter/claim_probe.h"
#include "src/filter/fingerprint_run.h"
#include "tests/filter/claim_runs.h"

namespace exposure_filter {
namespace {

using testing::Candidates;
using testing::InitialAndExpected;
using testing::MakeRuns;
using testing::OneRunPerSlice;
using testing::RunSet;
using testing::RunSpec;

// Checks `s` with `bitmap` (which must fit) and, when `by_runs`, through
// RemoveClaimedByRuns as well.
void ExpectExact(const RunSet& s, ClaimBitmap& bitmap,
                 const std::vector<uint64_t>& cands, const std::string& what) {
  std::vector<uint8_t> keep, expected;
  InitialAndExpected(s, cands, &keep, &expected);
  std::vector<uint8_t> by_runs = keep;
  ASSERT_TRUE(ClaimBitmap::Fits(s.views())) << what;
  bitmap.RemoveClaimed(s.views(), cands, keep.data());
  ASSERT_EQ(keep, expected) << what << " m=" << cands.size();
  RemoveClaimedByRuns(s.views(), cands, by_runs.data());
  ASSERT_EQ(by_runs, expected) << what << " (RemoveClaimedByRuns)";
}

TEST(ClaimBitmapTest, ClearsExactlyWhatSomeRunContains) {
  const std::vector<std::pair<const char*, std::vector<RunSpec>>> sets = {
      {"a user's usual shape: a sealed run and an open prefix run",
       {{2450, 21, 1'750'016}, {47, 19, 1 << 19}}},
      {"one run per slice (a spread user's)", OneRunPerSlice()},
      {"b = 32 at universes other than 2^b, a power of two below 2^b",
       {{2000, 32, 200'003}, {50, 24, 1'000'003}, {400, 20, 1 << 17}}},
      {"one code, empty runs, tiny universes, b = 1",
       {{1, 20, 1 << 20},
        {0, 20, 1 << 20},
        {3, 5, 27},
        {40, 12, 4000},
        {0, 32, uint64_t{1} << 32},  // empty: takes no bits
        {2, 1, 2},
        {1, 3, 5}}},
      {"nine runs (three passes of at most four)",
       {{100, 19, 1 << 19},
        {100, 18, 1 << 18},
        {100, 32, 300'007},
        {100, 17, 100'000},
        {100, 19, 1 << 19},
        {100, 16, 1 << 16},
        {100, 32, 70'001},
        {100, 20, 1 << 20},
        {100, 19, 400'000}}},
      {"universes summing to exactly kMaxBits",
       {{5000, 22, 1 << 21}, {3000, 21, 1 << 21}}},
      {"universes summing past kMaxBits: three batches",
       {{5000, 22, 3'000'000},
        {0, 32, 4'000'000},
        {3000, 21, 1 << 21},
        {2000, 32, 2'500'000},
        {100, 19, 1 << 19}}},
  };
  ClaimBitmap bitmap;  // reused across run sets, as per thread
  for (const auto& [what, specs] : sets) {
    const RunSet s = MakeRuns(specs, 7);
    size_t codes = 0;
    for (const FingerprintRun& r : s.runs) codes += r.count();
    for (size_t m : {1, 2, 300, 5000}) {
      ExpectExact(s, bitmap, Candidates(s, m, m + codes), what);
    }
  }
}

// Random geometries: 1 to 9 runs, precision 1 to 32, prefix universes and
// others up to kMaxBits (several batches where they sum past it), up to
// 1,500 codes a run and never more than the universe holds.
TEST(ClaimBitmapTest, RandomGeometries) {
  std::mt19937_64 rng(2024);
  ClaimBitmap bitmap;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<RunSpec> specs(1 + rng() % 9);
    std::string what = "trial " + std::to_string(trial) + ":";
    for (RunSpec& spec : specs) {
      spec.b = 1 + static_cast<int>(rng() % 32);
      const uint64_t most =
          std::min(uint64_t{1} << spec.b, ClaimBitmap::kMaxBits);
      spec.u = rng() % 2 == 0 && (uint64_t{1} << spec.b) <= most
                   ? uint64_t{1} << spec.b
                   : 2 + rng() % (most - 1);
      spec.n = static_cast<size_t>(
          rng() % 5 == 0 ? 0 : rng() % std::min<uint64_t>(spec.u, 1500) + 1);
      what += " (" + std::to_string(spec.n) + ", " + std::to_string(spec.b) +
              ", " + std::to_string(spec.u) + ")";
    }
    const RunSet s = MakeRuns(specs, 100 + trial);
    ExpectExact(s, bitmap, Candidates(s, 700, trial), what);
  }
}

// A run fits while its universe is at most kMaxBits; runs whose universes
// sum past it are checked in batches, four runs per pass at most.
TEST(ClaimBitmapTest, FitsAndPasses) {
  const RunSet edge = MakeRuns({{10, 22, 1 << 22}, {0, 32, 1 << 30}}, 1);
  EXPECT_TRUE(ClaimBitmap::Fits(edge.views()));  // the empty run takes none
  EXPECT_EQ(ClaimBitmap::Passes(edge.views()), 1u);
  const RunSet two = MakeRuns({{10, 22, 1 << 22}, {1, 2, 3}}, 2);
  EXPECT_TRUE(ClaimBitmap::Fits(two.views()));
  EXPECT_EQ(ClaimBitmap::Passes(two.views()), 2u);  // 2^22 + 3: two batches
  const RunSet over = MakeRuns({{10, 23, (1 << 22) + 1}}, 3);
  EXPECT_FALSE(ClaimBitmap::Fits(over.views()));
  const RunSet whole = MakeRuns({{10, 32, uint64_t{1} << 32}}, 3);
  EXPECT_FALSE(ClaimBitmap::Fits(whole.views()));
  std::vector<RunSpec> nine(9, {10, 19, 1 << 19});
  EXPECT_EQ(ClaimBitmap::Passes(MakeRuns(nine, 4).views()), 3u);
  EXPECT_TRUE(ClaimBitmap::Fits({}));
  EXPECT_EQ(ClaimBitmap::Passes({}), 0u);
}

// The cost model sends a user's usual shape to the bitmap and many small
// runs or large universes to the index; RemoveClaimedByRuns is exact either
// way (the sets below also run through ClaimIndexTest's index checks).
TEST(ClaimBitmapTest, CostModelPicksAsDocumented) {
  const RunSet usual = MakeRuns({{2450, 21, 1'750'016}, {47, 19, 1 << 19}}, 4);
  EXPECT_TRUE(BitmapCheaperThanIndex(usual.views(), 5000));
  std::vector<RunSpec> seven(7, {48, 32, 48 * 700});
  const RunSet many = MakeRuns(seven, 5);
  EXPECT_FALSE(BitmapCheaperThanIndex(many.views(), 5000));
  const RunSet heavy = MakeRuns({{50'000, 32, 35'000'000}}, 6);
  EXPECT_FALSE(BitmapCheaperThanIndex(heavy.views(), 5000));
  // Six five-day slices of a feed user (~2,400 codes): an index just built
  // is probed in cache at 1.5 ns a candidate by the vector kernel, which
  // makes it the cheaper check; the portable probe's 3.6 does not.
  const RunSet six = MakeRuns({{285, 17, 131'072},
                               {285, 19, 206'336},
                               {571, 19, 400'128},
                               {286, 19, 212'224},
                               {286, 19, 221'696},
                               {686, 19, 524'288}},
                              10);
  EXPECT_EQ(BitmapCheaperThanIndex(six.views(), 5000),
            ActiveClaimProbe() != &ProbeClaimsAvx512);
  // Against an index already filed, only one small run keeps the bitmap:
  // its bit set costs less to set than the probe saves over its test.
  const RunSet light = MakeRuns({{300, 17, 300 * 128}}, 7);
  EXPECT_TRUE(BitmapCheaperThanProbe(light.views(), 5000));
  const RunSet one = MakeRuns({{2000, 20, 2000 * 128}}, 8);
  EXPECT_FALSE(BitmapCheaperThanProbe(one.views(), 5000));
  EXPECT_FALSE(BitmapCheaperThanProbe(usual.views(), 5000));
  EXPECT_FALSE(BitmapCheaperThanProbe(many.views(), 5000));
  EXPECT_FALSE(BitmapCheaperThanProbe(heavy.views(), 5000));
  for (const RunSet* s : {&usual, &many, &heavy, &six}) {
    const std::vector<uint64_t> cands = Candidates(*s, 5000, 9);
    std::vector<uint8_t> keep, expected;
    InitialAndExpected(*s, cands, &keep, &expected);
    RemoveClaimedByRuns(s->views(), cands, keep.data());
    EXPECT_EQ(keep, expected);
  }
}

// A heavy set's code scratch is released (Trim); the bitmap stays bounded.
TEST(ClaimBitmapTest, TrimReleasesTheCodeScratch) {
  ClaimBitmap bitmap;
  const RunSet heavy = MakeRuns({{200'000, 32, 4'000'000}}, 8);
  std::vector<uint8_t> keep(10, 1);
  bitmap.RemoveClaimed(heavy.views(), testing::Hashes(10, 1), keep.data());
  EXPECT_GT(bitmap.retained_bytes(), 200'000 * 4);
  bitmap.Trim();
  EXPECT_LE(bitmap.retained_bytes(), ClaimBitmap::kMaxBits / 8 + 4096);
  ExpectExact(heavy, bitmap, Candidates(heavy, 300, 2), "after a trim");
}

}  // namespace
}  // namespace exposure_filter
