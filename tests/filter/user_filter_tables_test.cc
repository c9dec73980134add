// The in-memory tables of UserFilter (user_filter.h, "Memory layout"): every
// field a slice or run carries comes back exactly (ToParts, Stats), however
// far its value lies from what the compact encoding predicts; and the idle
// seal (SealIdle, run by the store's sweeper) shrinks an idle user without
// false negatives and with F <= delta, also for items recorded after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "src/filter/run_sizing.h"
#include "tests/filter/arrival_patterns.h"

namespace exposure_filter::testing {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

RunPart MakeRun(std::mt19937_64& rng, size_t n, int b, uint64_t u,
                uint32_t capacity, bool open) {
  RunPart r;
  r.run = *FingerprintRun::Build(Hashes(rng, n, false), b, u);
  r.capacity = std::max(capacity, r.run.count());
  r.open = open;
  return r;
}

// Sum of c_f / 2^b over the run (RunMeta::weight), computed here apart from
// the filter.
double ExactRate(const FingerprintRun& run) {
  const uint64_t full = uint64_t{1} << run.precision();
  const uint64_t u = run.universe();
  uint64_t w = 0;
  for (uint32_t f : run.Fingerprints()) {
    w += ((uint64_t{f} + 1) * full + u - 1) / u -
         (uint64_t{f} * full + u - 1) / u;
  }
  return static_cast<double>(w) / static_cast<double>(full);
}

// Slices whose values sit far from every prediction of the encoding:
// extreme and out-of-order event times, index jumps, a sealed run with
// spare capacity, universes that are not multiples of 256, 1 to 3,000
// items (Rice k off the canonical one, large payload differences).
FilterParts OddParts() {
  std::mt19937_64 rng(99);
  FilterParts parts;
  auto slice = [&](int64_t index, int64_t min, int64_t max) {
    parts.slices.emplace_back();
    parts.slices.back().index = index;
    parts.slices.back().min_event_ms = min;
    parts.slices.back().max_event_ms = max;
    return &parts.slices.back().runs;
  };
  slice(-7, kMin, kMax)->push_back(MakeRun(rng, 1, 32, 4294967291u, 1, false));
  // Its min lies before the previous slice's max (the difference wraps).
  auto* s = slice(-6, -5, -5);
  s->push_back(MakeRun(rng, 3, 30, 1000003, 9, false));  // spare capacity
  s->push_back(MakeRun(rng, 2, 28, uint64_t{1} << 28, 40, true));
  slice(0, 1000, 5000)->push_back(MakeRun(rng, 60, 31, 2147483647u, 60, false));
  // Its min lies before the previous slice's max (a negative distance).
  slice(1, 2000, 3000)->push_back(MakeRun(rng, 5, 20, 1 << 20, 5, false));
  s = slice(1000000, kNow, kNow + 1);
  s->push_back(MakeRun(rng, 3000, 32, uint64_t{1} << 32, 70000, true));
  s->push_back(MakeRun(rng, 2500, 32, 3000000000u, 2500, false));
  slice(1000001, kMax - 1, kMax)
      ->push_back(MakeRun(rng, 17, 24, 65536 * 3, 17, false));
  return parts;
}

TEST(UserFilterTablesTest, EveryFieldComesBackExactly) {
  const FilterPolicy policy = DefaultPolicy();
  const FilterParts in = OddParts();
  std::vector<double> rates;
  for (const SlicePart& s : in.slices) {
    double rate = 0;
    for (const RunPart& r : s.runs) rate += ExactRate(r.run);
    rates.push_back(rate);
  }
  FilterParts copy;
  for (const SlicePart& s : in.slices) {
    SlicePart c;
    c.index = s.index;
    c.min_event_ms = s.min_event_ms;
    c.max_event_ms = s.max_event_ms;
    for (const RunPart& r : s.runs) {
      RunPart rc;
      rc.run = *FingerprintRun::CopyOf(r.run.view());
      rc.capacity = r.capacity;
      rc.open = r.open;
      c.runs.push_back(std::move(rc));
    }
    copy.slices.push_back(std::move(c));
  }
  absl::StatusOr<UserFilter> f =
      UserFilter::FromParts(policy, std::move(copy), "key");
  ASSERT_TRUE(f.ok()) << f.status();
  const FilterParts out = f->ToParts();
  ASSERT_EQ(out.slices.size(), in.slices.size());
  for (size_t i = 0; i < in.slices.size(); ++i) {
    const SlicePart& a = in.slices[i];
    const SlicePart& b = out.slices[i];
    const std::string where = absl::StrCat("slice ", i);
    EXPECT_EQ(b.index, a.index) << where;
    EXPECT_EQ(b.min_event_ms, a.min_event_ms) << where;
    EXPECT_EQ(b.max_event_ms, a.max_event_ms) << where;
    ASSERT_EQ(b.runs.size(), a.runs.size()) << where;
    for (size_t j = 0; j < a.runs.size(); ++j) {
      const RunPart& x = a.runs[j];
      const RunPart& y = b.runs[j];
      const std::string run = absl::StrCat(where, " run ", j);
      EXPECT_EQ(y.open, x.open) << run;
      EXPECT_EQ(y.capacity, x.capacity) << run;
      EXPECT_EQ(y.run.count(), x.run.count()) << run;
      EXPECT_EQ(y.run.precision(), x.run.precision()) << run;
      EXPECT_EQ(y.run.universe(), x.run.universe()) << run;
      EXPECT_EQ(y.run.rice_k(), x.run.rice_k()) << run;
      EXPECT_EQ(y.run.payload_bits(), x.run.payload_bits()) << run;
      EXPECT_EQ(y.run.Fingerprints(), x.run.Fingerprints()) << run;
    }
  }
  // The weights (only Stats shows them): each slice's rate is its runs'
  // exact sum of c_f / 2^b. Every slice is reported (the policy ages by
  // the wall clock; a far-future `now` keeps none, so use each slice's own).
  const FilterPolicy keep_all = DefaultPolicy();
  for (size_t i = 0; i < in.slices.size(); ++i) {
    const int64_t now = keep_all.SliceStartMs(in.slices[i].index);
    const UserFilterStats st = f->Stats(keep_all, now);
    bool found = false;
    for (const SliceStats& s : st.slice_stats) {
      if (s.start_ms != now) continue;
      found = true;
      EXPECT_DOUBLE_EQ(s.estimated_fp_rate, rates[i]) << "slice " << i;
    }
    EXPECT_TRUE(found) << "slice " << i;
  }
}

// A slice may hold more runs than the slice head's 4-bit field: once the
// budget is spent, every write opens a run at half of what is left, and a
// 50,000-item user written slice by slice, 20 per call, opened 256 in one
// slice before Record capped a slice at kMaxRunsPerSlice. Their count must
// survive the head (it did not survive an earlier u8 SliceMeta::num_runs:
// the slice's 256th run wrapped the count to 0, every item of the slice a
// false negative), the cap must hold, and the filter must round-trip
// through its parts (a snapshot: FromParts refused more than 12 runs).
TEST(UserFilterTablesTest, ASliceWithManyRunsKeepsThemAll) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(8);
  UserFilter f("k");
  std::vector<uint64_t> recorded;
  constexpr int kSlices = 7, kCallsPerSlice = 357;
  // Each slice's calls in a burst at its span's last millisecond: the rate
  // rule (RunSizing::RateExpectedItems) then expects no more items than the
  // slice holds, and every run it opens is outgrown (the ladder). Written
  // at the slice's start, the rate rule gives each slice room for the
  // user's rate and the slices keep 3 runs each.
  for (int s = kSlices - 1; s >= 0; --s) {
    for (int c = 0; c < kCallsPerSlice; ++c) {
      const std::vector<uint64_t> h = Hashes(rng, 20, false);
      f.Record(p, h, p.SliceEndMs(p.SliceIndexOf(kNow - s * 5 * kDay)) - 1);
      recorded.insert(recorded.end(), h.begin(), h.end());
    }
  }
  size_t most = 0, total = 0;
  for (const SlicePart& s : f.ToParts().slices) {
    most = std::max(most, s.runs.size());
    total += s.runs.size();
  }
  EXPECT_GT(most, 15u);
  EXPECT_LE(most, static_cast<size_t>(UserFilter::kMaxRunsPerSlice));
  // Stats counts a tail as a run; the parts show it merged into its run
  // (at most one tail per slice).
  const size_t counted = f.Stats(p, kNow).segments;
  EXPECT_GE(counted, total);
  EXPECT_LE(counted, total + kSlices);
  EXPECT_LE(f.FpBound(p, kNow), p.fp_rate());
  ASSERT_NO_FATAL_FAILURE(ExpectNoFalseNegatives(f, p, kNow, recorded, "50k"));
  absl::StatusOr<UserFilter> back = UserFilter::FromParts(p, f.ToParts(), "k");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_NO_FATAL_FAILURE(
      ExpectNoFalseNegatives(*back, p, kNow, recorded, "50k from parts"));
}

// Every write of `writes` into `f`, then the whole history claimed.
std::vector<uint64_t> Replay(UserFilter& f, const FilterPolicy& p,
                             const std::vector<Write>& writes) {
  std::vector<uint64_t> recorded;
  for (const Write& w : writes) {
    f.Record(p, w.hashes, w.event_ms);
    recorded.insert(recorded.end(), w.hashes.begin(), w.hashes.end());
  }
  return recorded;
}

TEST(UserFilterTablesTest, SealIdleWaitsForTheIdleTime) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(3);
  UserFilter f("k");
  f.Touch(5000);
  Replay(f, p, Writes(Pattern::kSpread20PerCall, rng));
  const size_t bytes = f.MemoryBytes();
  // The pattern's newest slice ended at kNow - 3 h: every slice may seal.
  EXPECT_FALSE(f.SealIdle(p, kNow, 5000 + RunSizing::kIdleSealMs - 1));
  EXPECT_EQ(f.MemoryBytes(), bytes);
  EXPECT_TRUE(f.SealIdle(p, kNow, 5000 + RunSizing::kIdleSealMs));
  EXPECT_LT(f.MemoryBytes(), bytes);
  EXPECT_EQ(f.last_active_ms(), 5000);  // the sweeper is no activity
  // Sealed already: nothing left to do.
  EXPECT_FALSE(f.SealIdle(p, kNow, 5000 + 2 * RunSizing::kIdleSealMs));
}

// The newest slice is sealed only once the wall clock is past its span: a
// person idle for an hour between sessions comes back to the same slice,
// and a run sealed at the count of its first sessions could not take the
// next ones' items (docs/format2-design.md, "Sizing policy", the idle
// seal). The older slices of the same idle user are sealed meanwhile.
TEST(UserFilterTablesTest, SealIdleLeavesTheNewestSliceOpenUntilItsSpanEnds) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(5);
  UserFilter f("k");
  // 600 items, 20 per call, into kNow's slice, then 20 five days earlier,
  // written last so that no quiet seal took that older slice.
  std::vector<uint64_t> recorded;
  for (int c = 0; c < 30; ++c) {
    const std::vector<uint64_t> h = Hashes(rng, 20, false);
    f.Record(p, h, kNow);
    recorded.insert(recorded.end(), h.begin(), h.end());
  }
  const std::vector<uint64_t> old = Hashes(rng, 20, false);
  f.Record(p, old, kNow - 5 * kDay);
  recorded.insert(recorded.end(), old.begin(), old.end());
  const int64_t newest = p.SliceIndexOf(kNow);
  auto open_slices = [&] {
    std::vector<int64_t> open;
    for (const SlicePart& s : f.ToParts().slices) {
      bool any = false;
      for (const RunPart& r : s.runs) any |= r.open;
      if (any) open.push_back(s.index);
    }
    return open;
  };
  ASSERT_EQ(open_slices(), (std::vector<int64_t>{newest - 1, newest}));
  // Idle, the slice's span not over (its last millisecond): the older slice
  // only.
  EXPECT_TRUE(f.SealIdle(p, p.SliceEndMs(newest) - 1, RunSizing::kIdleSealMs));
  EXPECT_EQ(open_slices(), (std::vector<int64_t>{newest}));
  EXPECT_FALSE(f.SealIdle(p, p.SliceEndMs(newest) - 1, RunSizing::kIdleSealMs));
  // Past it: the newest too.
  const size_t bytes = f.MemoryBytes();
  EXPECT_TRUE(f.SealIdle(p, p.SliceEndMs(newest), RunSizing::kIdleSealMs));
  EXPECT_EQ(open_slices(), std::vector<int64_t>{});
  EXPECT_LT(f.MemoryBytes(), bytes);
  ASSERT_LE(f.FpBound(p, kNow), p.fp_rate());
  ASSERT_NO_FATAL_FAILURE(
      ExpectNoFalseNegatives(f, p, kNow, recorded, "sealed newest"));
}

// Every pattern, 3 seeds: sealed when idle, no false negative and F <=
// delta; then the user comes back with writes into the sealed newest slice
// and late ones into older slices, each checked the same way.
TEST(UserFilterTablesTest, SealIdleKeepsTheGuaranteesAndLateItemsToo) {
  const FilterPolicy p = DefaultPolicy();
  int sealed = 0;
  for (Pattern pattern : kAllPatterns) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      std::mt19937_64 rng(seed * 17 + static_cast<int>(pattern));
      UserFilter f("k");
      std::vector<uint64_t> recorded = Replay(f, p, Writes(pattern, rng));
      const std::string what =
          absl::StrCat(PatternName(pattern), " seed ", seed);
      const size_t before = f.MemoryBytes();
      // Past the span of kNow's slice: the newest is sealed too, so the
      // writes below go into a sealed newest slice.
      if (f.SealIdle(p, p.SliceEndMs(p.SliceIndexOf(kNow)),
                     RunSizing::kIdleSealMs)) {
        ++sealed;
        EXPECT_LT(f.MemoryBytes(), before) << what;
      }
      ASSERT_LE(f.FpBound(p, kNow), p.fp_rate()) << what;
      ASSERT_NO_FATAL_FAILURE(
          ExpectNoFalseNegatives(f, p, kNow, recorded, what + " sealed"));
      for (int w = 0; w < 40; ++w) {
        const int64_t t = w % 4 == 3 ? kNow - (w % 5 + 1) * 5 * kDay : kNow;
        const std::vector<uint64_t> h = Hashes(rng, 1 + w % 20, false);
        f.Record(p, h, t);
        recorded.insert(recorded.end(), h.begin(), h.end());
        const std::string where = absl::StrCat(what, " late write ", w);
        ASSERT_LE(f.FpBound(p, kNow), p.fp_rate()) << where;
        ASSERT_NO_FATAL_FAILURE(
            ExpectNoFalseNegatives(f, p, kNow, recorded, where));
      }
    }
  }
  EXPECT_GE(sealed, 6);  // at least the two spread patterns, every seed
}

}  // namespace
}  // namespace exposure_filter::testing
