// Property tests of the format-2 UserFilter (fixed seeds): zero false
// negatives inside the window and the union bound F <= delta after every
// write, across growth, small calls, out-of-order backfills, aging and
// legacy Bloom slices; the measured FP rate within F.
#include "src/filter/user_filter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/filter/arrival_patterns.h"

namespace exposure_filter::testing {
namespace {

double Bound(const UserFilter& f, const FilterPolicy& p, int64_t now) {
  return f.Stats(p, now).estimated_fp_rate;
}

// Relative slack for floating-point sums of n/U.
constexpr double kSlack = 1e-12;

// Replays `writes`, checking after every one that F <= delta and that the
// write's own items are claimed; the whole history every `full_every`
// writes and at the end.
void ReplayChecked(UserFilter& f, const FilterPolicy& p,
                   const std::vector<Write>& writes, int64_t now,
                   size_t full_every, const std::string& what) {
  std::vector<uint64_t> recorded;
  for (size_t i = 0; i < writes.size(); ++i) {
    f.Record(p, writes[i].hashes, writes[i].event_ms);
    recorded.insert(recorded.end(), writes[i].hashes.begin(),
                    writes[i].hashes.end());
    const double bound = Bound(f, p, now);
    ASSERT_LE(bound, p.fp_rate() * (1 + kSlack))
        << what << ": union bound after write " << i;
    const std::string where = absl::StrCat(what, " write ", i);
    ASSERT_NO_FATAL_FAILURE(
        ExpectNoFalseNegatives(f, p, now, writes[i].hashes, where));
    if ((i + 1) % full_every == 0 || i + 1 == writes.size()) {
      ASSERT_NO_FATAL_FAILURE(
          ExpectNoFalseNegatives(f, p, now, recorded, where));
    }
  }
}

// A run's share of F is weight * 2^-precision exactly as std::ldexp gives
// it (fp() builds the power of two from its exponent bits): F's sums, and
// with them every budget decision, are unchanged bit for bit.
TEST(UserFilterTest, RunFpIsTheLdexpOfItsWeight) {
  std::mt19937_64 rng(7);
  for (int b = 1; b <= 32; ++b) {
    for (int i = 0; i < 1000; ++i) {
      UserFilter::RunMeta r;
      r.precision = static_cast<uint8_t>(b);
      r.weight = i == 0 ? 0 : rng() >> (rng() % 64);
      r.weight &= (uint64_t{1} << 40) - 1;
      const double want = std::ldexp(static_cast<double>(r.weight), -b);
      ASSERT_EQ(r.fp(), want) << "b=" << b << " weight=" << r.weight;
    }
  }
}

TEST(UserFilterTest, EveryPatternHasNoFalseNegativesAndBoundedF) {
  const FilterPolicy p = DefaultPolicy();
  for (Pattern pattern : kAllPatterns) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      std::mt19937_64 rng(seed * 31 + static_cast<int>(pattern));
      UserFilter f("k");
      ASSERT_NO_FATAL_FAILURE(ReplayChecked(f, p, Writes(pattern, rng), kNow,
                                            50, PatternName(pattern)));
    }
  }
}

// A user growing from 1 to 50,000 items at 20 per call over 29 days, and
// one growing in a single slice: the budget halves per new run, so F never
// passes delta however long the ladder.
TEST(UserFilterTest, GrowthTo50000KeepsTheBound) {
  const FilterPolicy p = DefaultPolicy();
  for (bool spread : {false, true}) {
    std::mt19937_64 rng(spread ? 5 : 6);
    std::vector<Write> writes;
    for (int c = 0; c < 2500; ++c) {
      const int64_t t = spread ? kNow - 29 * kDay + 29 * kDay * c / 2500 : kNow;
      writes.push_back({Hashes(rng, 20, false), t});
    }
    UserFilter f("k");
    ASSERT_NO_FATAL_FAILURE(ReplayChecked(f, p, writes, kNow, 500,
                                          spread ? "spread" : "one slice"));
    EXPECT_GE(f.Stats(p, kNow).items, 49'000u);
  }
}

// One item per call, each at its own random time in the window: every call
// may land in an old, sealed slice.
TEST(UserFilterTest, SingleLateItemsKeepTheBound) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(11);
  std::vector<Write> writes;
  for (int c = 0; c < 3000; ++c) {
    writes.push_back({Hashes(rng, 1, false),
                      kNow - static_cast<int64_t>(
                                 rng() % static_cast<uint64_t>(29 * kDay))});
  }
  UserFilter f("k");
  ASSERT_NO_FATAL_FAILURE(ReplayChecked(f, p, writes, kNow, 300, "late"));
}

TEST(UserFilterTest, RecordCountsOnlyItemsTheSliceDidNotClaim) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(9);
  const std::vector<uint64_t> items = Hashes(rng, 500, false);
  UserFilter f("k");
  const uint64_t first = f.Record(p, items, kNow);
  // Distinct fingerprints at 2^17+ precision: a collision among 500 is
  // possible but rare.
  EXPECT_LE(first, 500u);
  EXPECT_GE(first, 498u);
  const uint64_t items_before = f.Stats(p, kNow).items;
  EXPECT_EQ(f.Record(p, items, kNow), 0u);
  EXPECT_EQ(f.Stats(p, kNow).items, items_before);
  // Duplicates inside one batch count once.
  std::vector<uint64_t> twice = Hashes(rng, 10, false);
  twice.insert(twice.end(), twice.begin(), twice.end());
  EXPECT_EQ(f.Record(p, twice, kNow), 10u);
}

// Aging: writes over 60 days with the clock moving; after each day's
// DropExpired every item whose event is inside the retention is claimed,
// and no slice older than retention + span survives.
TEST(UserFilterTest, AgingKeepsTheWindowAndDropsTheRest) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(21);
  UserFilter f("k");
  std::vector<std::pair<int64_t, std::vector<uint64_t>>> history;
  const int64_t start = kNow - 60 * kDay;
  for (int day = 0; day < 60; ++day) {
    const int64_t now = start + day * kDay;
    f.DropExpired(p, now);
    for (int call = 0; call < 5; ++call) {
      std::vector<uint64_t> h = Hashes(rng, 20, false);
      const int64_t t = now - static_cast<int64_t>(rng() % (3 * kDay));
      f.Record(p, h, t);
      history.emplace_back(t, std::move(h));
    }
    ASSERT_LE(Bound(f, p, now), p.fp_rate() * (1 + kSlack)) << "day " << day;
    std::vector<uint64_t> inside;
    for (const auto& [t, h] : history) {
      if (!p.EventExpired(t, now))
        inside.insert(inside.end(), h.begin(), h.end());
    }
    ASSERT_NO_FATAL_FAILURE(
        ExpectNoFalseNegatives(f, p, now, inside, absl::StrCat("day ", day)));
    for (const SlicePart& s : f.ToParts().slices) {
      ASSERT_TRUE(p.SliceLive(s.index, now)) << "dead slice kept, day " << day;
      // Remembered at most retention + span: a live slice ends after
      // now - retention, so it started after now - retention - span.
      ASSERT_GT(p.SliceStartMs(s.index),
                now - p.retention_ms() - p.slice_span_ms());
    }
  }
  // The whole history ages out.
  const int64_t later =
      start + 60 * kDay + p.retention_ms() + p.slice_span_ms();
  EXPECT_GT(f.DropExpired(p, later), 0);
  EXPECT_TRUE(f.empty());
  EXPECT_FALSE(f.HasLiveSlices(p, later));
}

// A user loaded with format-1 Bloom slices keeps them read-only; new writes
// go to runs whose budget is delta minus the legacy slices' rate.
TEST(UserFilterTest, LegacyBloomSlicesStayAndRunsShareTheBudget) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(33);
  BloomSlices old;
  std::vector<uint64_t> old_items;
  for (int d = 25; d >= 0; d -= 5) {
    std::vector<uint64_t> h = Hashes(rng, 300, false);
    old.Record(p, h, kNow - d * kDay);
    old_items.insert(old_items.end(), h.begin(), h.end());
  }
  absl::StatusOr<UserFilter> f = UserFilter::FromParts(p, old.ToParts(), "k");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_NE(f->legacy(), nullptr);
  const size_t legacy_bytes = f->legacy()->MemoryBytes();
  ASSERT_NO_FATAL_FAILURE(
      ExpectNoFalseNegatives(*f, p, kNow, old_items, "loaded"));
  // 2,000 new items, 20 per call, into the current (legacy) slice and older.
  std::vector<Write> writes;
  for (int c = 0; c < 100; ++c) {
    writes.push_back({Hashes(rng, 20, false), kNow - (c % 3) * 5 * kDay});
  }
  ASSERT_NO_FATAL_FAILURE(ReplayChecked(*f, p, writes, kNow, 25, "mixed"));
  ASSERT_NO_FATAL_FAILURE(
      ExpectNoFalseNegatives(*f, p, kNow, old_items, "old"));
  // The legacy slices were not written to.
  EXPECT_EQ(f->legacy()->MemoryBytes(), legacy_bytes);
  // A slice holding both kinds appears once in the parts, with both.
  bool mixed = false;
  for (const SlicePart& s : f->ToParts().slices) {
    mixed |= !s.bloom_segments.empty() && !s.runs.empty();
  }
  EXPECT_TRUE(mixed);
  // Once the legacy slices age out, the legacy part is gone.
  const int64_t later = kNow + 40 * kDay;
  f->DropExpired(p, later);
  EXPECT_EQ(f->legacy(), nullptr);
}

// Measured FP over 20,000 never-recorded candidates per user, pooled over
// the patterns: within the users' mean bound F (<= delta) plus 4 standard
// deviations of the binomial count.
TEST(UserFilterTest, MeasuredFpIsWithinTheBound) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 fresh_rng(99);
  const std::vector<uint64_t> fresh = Hashes(fresh_rng, 20'000, true);
  for (Pattern pattern : kAllPatterns) {
    double claimed = 0, bound = 0;
    const int users = 10;
    for (int u = 0; u < users; ++u) {
      std::mt19937_64 rng(500 + u);
      UserFilter f("k");
      for (const Write& w : Writes(pattern, rng)) {
        f.Record(p, w.hashes, w.event_ms);
      }
      claimed += static_cast<double>(ClaimedFresh(f, p, kNow, fresh));
      bound += Bound(f, p, kNow);
    }
    const double probes = 20'000.0 * users;
    const double rate = claimed / probes;
    const double mean_bound = bound / users;
    const double sd = std::sqrt(mean_bound * (1 - mean_bound) / probes);
    EXPECT_LE(mean_bound, p.fp_rate());
    EXPECT_LE(rate, mean_bound + 4 * sd + 1.0 / probes)
        << PatternName(pattern) << ": measured " << rate << " bound "
        << mean_bound;
  }
}

TEST(UserFilterTest, StatsDescribeTheLiveRuns) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(3);
  UserFilter f("owner");
  f.Record(p, Hashes(rng, 100, false), kNow - 12 * kDay);
  f.Record(p, Hashes(rng, 50, false), kNow);
  const UserFilterStats st = f.Stats(p, kNow);
  EXPECT_EQ(st.slices, 2u);
  EXPECT_EQ(st.items, 150u);
  EXPECT_EQ(st.slice_stats.size(), 2u);
  EXPECT_EQ(st.bytes, f.MemoryBytes());
  EXPECT_GT(st.estimated_fp_rate, 0);
  EXPECT_LE(st.estimated_fp_rate, p.fp_rate());
  EXPECT_EQ(st.oldest_exposure_ms, kNow - 12 * kDay);
  EXPECT_EQ(st.newest_exposure_ms, kNow);
  std::vector<int64_t> claiming;
  const std::vector<uint64_t> one = Hashes(rng, 1, false);
  f.Record(p, one, kNow - 12 * kDay);
  f.ClaimingSlices(p, kNow, one[0], &claiming);
  ASSERT_FALSE(claiming.empty());
  EXPECT_EQ(claiming.front(), p.SliceIndexOf(kNow - 12 * kDay));
}

TEST(UserFilterLayoutTest, OnePointerAndKeyAndLastActiveSurviveRebuilds) {
  EXPECT_EQ(sizeof(UserFilter), sizeof(void*));
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(4);
  UserFilter f("alice");
  f.Touch(1234);
  for (int i = 0; i < 30; ++i) {
    f.Record(p, Hashes(rng, 20, false), kNow - (i % 6) * 5 * kDay);
  }
  EXPECT_EQ(f.key(), "alice");
  EXPECT_EQ(f.last_active_ms(), 1234);
  f.SetKey("bob");
  EXPECT_EQ(f.key(), "bob");
  EXPECT_EQ(f.last_active_ms(), 1234);
  const std::string long_key(70'000, 'x');
  f.SetKey(long_key);
  EXPECT_EQ(f.key(), long_key);
  UserFilter g(std::move(f));
  EXPECT_EQ(g.key(), long_key);
  EXPECT_EQ(f.MemoryBytes(), 0u);  // NOLINT: moved-from is empty
}

}  // namespace
}  // namespace exposure_filter::testing
