// Format 2's memory targets, asserted in bytes: what the store accounts per
// user (UserFilter::MemoryBytes + the map slot, GetUserStats.bytes) for each
// arrival pattern at delta = 1%, retention 30 d, span 5 d, with the 14-byte
// map key of a 12-byte user id. Deterministic (fixed seeds), not timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "src/filter/run_sizing.h"
#include "tests/filter/arrival_patterns.h"

namespace exposure_filter::testing {
namespace {

// The store's map slot: one pointer plus a control byte
// (ShardedFilterStore::EntryOverheadBytes).
constexpr size_t kSlotBytes = sizeof(UserFilter) + 1;
// Surface id (2 bytes) + "u" + 11 digits, as bench/memory_bench.
const std::string kKey = std::string("\0\0", 2) + "u00000000001";

// The target: below RedisBloom's bytes for the same count (BF.RESERVE 0.01
// N: 2,888 B at 2,000 items, 7,024 at 5,000; docs/format2-design.md, "The
// problem"), and 100 B for the light user.
size_t TargetBytes(Pattern p) {
  switch (p) {
    case Pattern::kLight20:
      return 100;
    case Pattern::kBackfill5000:
      return 7024;
    default:
      return 2888;
  }
}

// Regression ceilings: the mean bytes measured here (20 users, 2026-11-26,
// with the seals at L + 1 slices and the newest run's re-truncation) +
// 0.5%, rounded up (or the lower ceiling they had), the spread rows'
// written ceiling at most the target's 2,888. The target holds for every
// row at every moment: the spread rows right after the writes were
// 2,888.9 / 2,899.6 B before those two rules (newest slice open at 2^19),
// now 2,857.9 / 2,876.4 (its run re-truncated to 2^18 once the older
// slices are sealed, RunSizing::LoweredNewestRun); idle they rose from
// 2,847.6 / 2,861.3 to 2,854.2 / 2,873.4 (the seals' L + 1 slices:
// docs/format2-design.md, "Sizing policy", quiet slices; "Measured and
// rejected", seals at L + 1 slices).
// `idle`: after the store's sweeper sealed the idle user
// (UserFilter::SealIdle), the figure memory_bench reports as accounted.
// Before the compact tables and the idle seal the spread
// patterns measured 2,969 and 2,953 B here.
size_t CeilingBytes(Pattern p, bool idle) {
  switch (p) {
    case Pattern::kOneCall2000:  // 2,701.1 B
      return 2715;
    case Pattern::kToday20PerCall:  // 2,479.8 B
      return 2493;
    case Pattern::kSpread20PerCall:  // written 2,857.9, idle 2,854.2 B
      return idle ? 2869 : 2873;
    case Pattern::kSpread1PerCall:  // written 2,876.4, idle 2,873.4 B
      return idle ? 2888 : 2888;
    case Pattern::kLight20:  // 89.7 B
      return 91;
    case Pattern::kBackfill5000:  // 6,533.9 B
      return 6567;
  }
  return 0;
}

// The largest single user of the 20 (same run) + 0.5%: a rule that helps
// the mean by sacrificing some users shows here. Written 2,705 / 2,483 /
// 2,866 / 2,883 / 90 / 6,585 B; idle the same but the spread rows' 2,864 /
// 2,880 (the target's 2,888 is a mean per pattern).
size_t WorstUserCeilingBytes(Pattern p, bool idle) {
  switch (p) {
    case Pattern::kOneCall2000:
      return 2719;
    case Pattern::kToday20PerCall:
      return 2496;
    case Pattern::kSpread20PerCall:
      return idle ? 2879 : 2881;
    case Pattern::kSpread1PerCall:
      return idle ? 2895 : 2898;
    case Pattern::kLight20:
      return 91;
    case Pattern::kBackfill5000:
      return 6618;
  }
  return 0;
}

struct Bytes {
  double mean = 0;
  double worst = 0;  // the largest single user
};

// Bytes per user over `users` users of pattern `p`; `idle`: after SealIdle,
// as the sweeper runs it once the user has been idle.
Bytes UserBytes(Pattern p, int users, bool idle) {
  const FilterPolicy policy = DefaultPolicy();
  Bytes b;
  for (int u = 0; u < users; ++u) {
    std::mt19937_64 rng(1000 + u);
    UserFilter f(kKey);
    for (const Write& w : Writes(p, rng))
      f.Record(policy, w.hashes, w.event_ms);
    // An hour after the last write (the sweeper's idle time): the spread
    // patterns' newest slice ended at kNow - 3 h, the others' is kNow's.
    if (idle) {
      f.SealIdle(policy, kNow + RunSizing::kIdleSealMs,
                 f.last_active_ms() + RunSizing::kIdleSealMs);
    }
    EXPECT_LE(f.FpBound(policy, kNow), policy.fp_rate());
    const double bytes = static_cast<double>(f.MemoryBytes() + kSlotBytes);
    b.mean += bytes / users;
    b.worst = std::max(b.worst, bytes);
  }
  return b;
}

TEST(Format2MemoryTest, EveryPatternMeetsItsMemoryTarget) {
  for (bool idle : {false, true}) {
    for (Pattern p : kAllPatterns) {
      const Bytes b = UserBytes(p, 20, idle);
      std::printf(
          "%-36s %-7s %8.1f B/user (ceiling %zu, target %zu), worst user "
          "%.0f (ceiling %zu)\n",
          PatternName(p), idle ? "idle" : "written", b.mean,
          CeilingBytes(p, idle), TargetBytes(p), b.worst,
          WorstUserCeilingBytes(p, idle));
      const char* when = idle ? " idle" : " written";
      const bool spread_written = !idle && (p == Pattern::kSpread20PerCall ||
                                            p == Pattern::kSpread1PerCall);
      if (!spread_written) {
        EXPECT_LE(b.mean, TargetBytes(p)) << PatternName(p) << when;
      }
      EXPECT_LE(b.mean, CeilingBytes(p, idle)) << PatternName(p) << when;
      EXPECT_LE(b.worst, WorstUserCeilingBytes(p, idle))
          << PatternName(p) << when;
    }
  }
}

TEST(Format2MemoryTest, TheLightUserIsUnder100BytesEvenAlone) {
  const FilterPolicy policy = DefaultPolicy();
  for (int u = 0; u < 50; ++u) {
    std::mt19937_64 rng(77 + u);
    UserFilter f(kKey);
    for (const Write& w : Writes(Pattern::kLight20, rng)) {
      f.Record(policy, w.hashes, w.event_ms);
    }
    ASSERT_LE(f.MemoryBytes() + kSlotBytes, 100u) << "user " << u;
  }
}

// A user growing to 10,000 items, 20 per call over 29 days in order (not
// one of the target's patterns: 2,000 is): the growth ladder must not run
// away.
// Before the first run's share was capped (kFirstRunShare) its 655 items at
// 2^-17 took half of delta and this user cost 21,741 B (17.4 bits/item);
// 14,749 B since (20 users; scratch harness, docs/format2-design.md), and
// 14,234.0 B here (5 users, 2026-11-26). The ceiling: that + 0.5%,
// below the target's RedisBloom figure at 5,000 items scaled linearly to 10,000
// (14,048 B, an extrapolation) + 10%, the ceiling before. A sizing rule that
// spends the budget of the slices that come next shows here first (a quiet
// seal at 0.9 of what the newest slice's growth leaves: 14,846 B).
TEST(Format2MemoryTest, AUserGrowingTo10000ItemsStaysNearTheBloomFilter) {
  const FilterPolicy policy = DefaultPolicy();
  constexpr int kUsers = 5;
  constexpr int kCalls = 500;
  double total = 0;
  for (int u = 0; u < kUsers; ++u) {
    std::mt19937_64 rng(3000 + u);
    UserFilter f(kKey);
    for (int c = 0; c < kCalls; ++c) {
      const int64_t t =
          kNow - 29 * kDay + static_cast<int64_t>(29 * kDay * c / kCalls);
      f.Record(policy, Hashes(rng, 20, false), t);
    }
    ASSERT_LE(f.FpBound(policy, kNow), policy.fp_rate());
    total += static_cast<double>(f.MemoryBytes() + kSlotBytes);
  }
  std::printf("10000, 20/call, 29 days in order %8.1f B/user\n",
              total / kUsers);
  EXPECT_LE(total / kUsers, 14306);
}

// Runs of `f` as (slice index, open) pairs, slice by slice.
std::vector<std::pair<int64_t, bool>> Runs(const UserFilter& f) {
  std::vector<std::pair<int64_t, bool>> runs;
  for (const SlicePart& s : f.ToParts().slices) {
    for (const RunPart& r : s.runs) runs.emplace_back(s.index, r.open);
  }
  return runs;
}

// The quiet rule (run_sizing.h): a write behind the newest slice restarts
// every slice's quiet count, so a backfill's slices stay open (prefix runs
// that can still be re-mapped to any universe) however long one of them goes
// unwritten; once the writes stay in the newest slice, the older ones are
// sealed after kQuietWrites writes.
TEST(Format2MemoryTest, ABackfillKeepsItsSlicesOpenUntilTheWritesMoveOn) {
  const FilterPolicy policy = DefaultPolicy();
  std::mt19937_64 rng(5);
  UserFilter f(kKey);
  const int64_t newest = kNow;
  const int64_t older[] = {kNow - 6 * kDay, kNow - 11 * kDay, kNow - 16 * kDay};
  f.Record(policy, Hashes(rng, 20, false), newest);
  // 3 older slices, each left unwritten for 3 * kQuietWrites writes in turn.
  for (int64_t t : older) {
    for (int w = 0; w < 3 * RunSizing::kQuietWrites; ++w) {
      f.Record(policy, Hashes(rng, 20, false), t);
    }
  }
  for (const auto& [index, open] : Runs(f)) {
    EXPECT_TRUE(open) << "slice " << index << " sealed during the backfill";
  }
  // The writes move on to the newest slice: the older ones go quiet.
  for (int w = 0; w < RunSizing::kQuietWrites; ++w) {
    f.Record(policy, Hashes(rng, 20, false), newest);
  }
  const int64_t newest_index = policy.SliceIndexOf(newest);
  for (const auto& [index, open] : Runs(f)) {
    EXPECT_EQ(open, index == newest_index) << "slice " << index;
  }
}

// The seal rule's two budgets (run_sizing.h): while the user writes, a
// quiet slice takes at most half of what the other runs leave, and when
// that cap (not its proportional share) sets its universe so close to 2^b
// that sealing gains under kDeferBelowGainBits per item, it stays open; the
// idle seal then takes up to kIdleShareOfLeft of what is left. 1/call over
// 29 days: the sixth slice (345 items, its run re-truncated to 2^18 while
// it was the newest, RunSizing::LoweredNewestRun) waits and the idle seal
// gives it its proportional universe (241,920 over L + 1 slices), where the
// quiet seal's half of what is left would have kept it near 2^18;
// 20/call over 29 days: the fifth slice's quiet seal gains more than that,
// so it is sealed while the user writes. F <= delta after every write and
// after the idle seal; no false negative.
TEST(Format2MemoryTest, AQuietSealThatWouldGainLittleWaitsForTheIdleSeal) {
  const FilterPolicy policy = DefaultPolicy();
  for (Pattern p : {Pattern::kSpread1PerCall, Pattern::kSpread20PerCall}) {
    std::mt19937_64 rng(1000);
    UserFilter f(kKey);
    std::vector<uint64_t> recorded;
    int64_t newest = 0;
    for (const Write& w : Writes(p, rng)) {
      f.Record(policy, w.hashes, w.event_ms);
      recorded.insert(recorded.end(), w.hashes.begin(), w.hashes.end());
      newest = std::max(newest, policy.SliceIndexOf(w.event_ms));
      ASSERT_LE(f.FpBound(policy, kNow), policy.fp_rate()) << PatternName(p);
    }
    const bool waits = p == Pattern::kSpread1PerCall;
    // The slice before the newest: open iff its seal waits.
    for (const SlicePart& s : f.ToParts().slices) {
      bool open = false;
      for (const RunPart& r : s.runs) open |= r.open;
      EXPECT_EQ(open, s.index == newest || (waits && s.index == newest - 1))
          << PatternName(p) << " slice " << s.index;
    }
    EXPECT_TRUE(f.SealIdle(policy, kNow + RunSizing::kIdleSealMs,
                           f.last_active_ms() + RunSizing::kIdleSealMs))
        << PatternName(p);
    ASSERT_LE(f.FpBound(policy, kNow), policy.fp_rate()) << PatternName(p);
    ASSERT_NO_FATAL_FAILURE(
        ExpectNoFalseNegatives(f, policy, kNow, recorded, PatternName(p)));
    if (!waits) continue;
    uint64_t live = 0;
    for (const SlicePart& s : f.ToParts().slices) {
      for (const RunPart& r : s.runs) live += r.run.count();
    }
    const double budget = RunSizing::AdmissionBudget(policy.fp_rate(), 0);
    for (const SlicePart& s : f.ToParts().slices) {
      if (s.index != newest - 1) continue;
      ASSERT_EQ(s.runs.size(), 1u);
      const FingerprintRun& run = s.runs[0].run;
      EXPECT_FALSE(s.runs[0].open);
      // Re-mapped below its 2^b prefix run, down to its proportional share.
      EXPECT_LT(run.universe(), uint64_t{1} << run.precision());
      EXPECT_LE(static_cast<double>(run.universe()),
                RunSizing::ProportionalUniverse(budget, run.count(), live,
                                                policy.max_live_slices()));
    }
  }
}

// The newest slice's run is sized from the user's rate
// (RunSizing::RateExpectedItems): 2,000 items at 20 per call over 29 days
// put ~345 items in the newest slice, and its run opens at 2^19 with room
// for about that many; sized for 2 max(n_s, N / L) at half of what is left
// it opened at 2^20 (~13.1 bits/item instead of ~12.1), for every one of
// these users.
TEST(Format2MemoryTest, TheNewestSlicesRunIsSizedFromTheUsersRate) {
  const FilterPolicy policy = DefaultPolicy();
  for (int u = 0; u < 5; ++u) {
    std::mt19937_64 rng(1000 + u);
    UserFilter f(kKey);
    for (const Write& w : Writes(Pattern::kSpread20PerCall, rng)) {
      f.Record(policy, w.hashes, w.event_ms);
    }
    const FilterParts parts = f.ToParts();
    const SlicePart& newest = parts.slices.back();
    int open = 0;
    for (const RunPart& r : newest.runs) {
      if (!r.open) continue;
      ++open;
      EXPECT_LE(r.run.precision(), 19) << "user " << u;
      EXPECT_LE(r.capacity, 2 * r.run.count()) << "user " << u;
    }
    EXPECT_EQ(open, 1) << "user " << u;
    EXPECT_LE(f.FpBound(policy, kNow), policy.fp_rate());
  }
}

// Once every older slice is sealed, the newest slice's open run is
// re-truncated to the least precision whose capacity, at 0.9 of what the
// other runs leave, holds the slice's predicted count
// (RunSizing::LoweredNewestRun): 20/call over 29 days ends with ~340 items
// in a run at 2^18 (~11.1 bits/item) instead of 2^19 (~12.1), 2,857.9 B
// instead of 2,888.9 right after the writes. The truncation is exact (a
// prefix of a prefix): no false negative, and F <= delta after every write.
TEST(Format2MemoryTest, TheNewestRunIsReTruncatedOnceTheOlderSlicesAreSealed) {
  const FilterPolicy policy = DefaultPolicy();
  for (int u = 0; u < 5; ++u) {
    std::mt19937_64 rng(1000 + u);
    UserFilter f(kKey);
    std::vector<uint64_t> recorded;
    for (const Write& w : Writes(Pattern::kSpread20PerCall, rng)) {
      f.Record(policy, w.hashes, w.event_ms);
      recorded.insert(recorded.end(), w.hashes.begin(), w.hashes.end());
      ASSERT_LE(f.FpBound(policy, kNow), policy.fp_rate()) << "user " << u;
    }
    const FilterParts parts = f.ToParts();
    for (size_t i = 0; i + 1 < parts.slices.size(); ++i) {
      for (const RunPart& r : parts.slices[i].runs) EXPECT_FALSE(r.open);
    }
    const SlicePart& newest = parts.slices.back();
    ASSERT_EQ(newest.runs.size(), 1u) << "user " << u;
    const RunPart& run = newest.runs[0];
    EXPECT_TRUE(run.open);
    EXPECT_EQ(run.run.precision(), 18) << "user " << u;
    EXPECT_EQ(run.run.universe(), uint64_t{1} << 18);
    EXPECT_GE(run.capacity, run.run.count());
    ASSERT_NO_FATAL_FAILURE(ExpectNoFalseNegatives(
        f, policy, kNow, recorded, "user " + std::to_string(u)));
  }
}

// The user's first run (b = 17, so that a light user stays under 100 B)
// holds at most budget / 32 of F: a user that keeps writing moves on to
// runs of b >= 19 before its low-precision items take a share the rest of
// its growth needs (at 1/2 of the budget, the first run's 655 items left
// a 5,000-item backfill too little).
TEST(Format2MemoryTest, TheFirstRunTakesASmallShare) {
  const FilterPolicy policy = DefaultPolicy();
  std::mt19937_64 rng(6);
  UserFilter f(kKey);
  for (int w = 0; w < 10; ++w) f.Record(policy, Hashes(rng, 20, false), kNow);
  const FilterParts parts = f.ToParts();
  ASSERT_EQ(parts.slices.size(), 1u);
  const std::vector<RunPart>& runs = parts.slices[0].runs;
  ASSERT_GE(runs.size(), 2u);
  EXPECT_EQ(runs[0].run.precision(), 17);
  const double budget = RunSizing::AdmissionBudget(policy.fp_rate(), 0);
  EXPECT_LE(runs[0].capacity, budget / 32 * (1 << 17));
  EXPECT_LE(runs[0].run.count(), runs[0].capacity);
  EXPECT_GE(runs[1].run.precision(), 19);
}

}  // namespace
}  // namespace exposure_filter::testing
