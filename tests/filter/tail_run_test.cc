// Tail runs of the format-2 UserFilter (user_filter.h, "Writes"): once a
// slice's open run holds UserFilter::kTailFromItems items, new items go to a
// small tail run beside it. These tests pin what must hold for that to be
// invisible: every lookup and Record's own "already claimed" check consult
// the tail, the tail is merged geometrically, at seal and in ToParts, and F
// stays within delta.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "src/filter/run_sizing.h"
#include "tests/filter/arrival_patterns.h"

namespace exposure_filter::testing {
namespace {

constexpr double kSlack = 1e-12;
// One call of this many items opens a run above kTailFromItems.
constexpr size_t kBulk = 5000;
static_assert(kBulk > UserFilter::kTailFromItems);

// The runs (Stats segments) of the slice holding `event_ms`.
uint32_t RunsOfSlice(const UserFilter& f, const FilterPolicy& p, int64_t now,
                     int64_t event_ms) {
  const int64_t start = p.SliceStartMs(p.SliceIndexOf(event_ms));
  for (const SliceStats& s : f.Stats(p, now).slice_stats) {
    if (s.start_ms == start) return s.segments;
  }
  return 0;
}

// A user whose slice at `t` holds kBulk items in one open run and whose
// `writes` later calls of 20 went to its tail; `recorded` gets every item,
// `tail` those of the later calls.
UserFilter UserWithTail(const FilterPolicy& p, std::mt19937_64& rng, int64_t t,
                        int writes, std::vector<uint64_t>* recorded,
                        std::vector<uint64_t>* tail) {
  UserFilter f("k");
  const std::vector<uint64_t> bulk = Hashes(rng, kBulk, false);
  f.Record(p, bulk, t);
  recorded->insert(recorded->end(), bulk.begin(), bulk.end());
  EXPECT_EQ(f.tail_items(), 0u);
  uint64_t added = 0;
  for (int c = 0; c < writes; ++c) {
    const std::vector<uint64_t> h = Hashes(rng, 20, false);
    added += f.Record(p, h, t);
    recorded->insert(recorded->end(), h.begin(), h.end());
    tail->insert(tail->end(), h.begin(), h.end());
  }
  // Below the merge threshold (max(64, ~5000 / 16) = 312 items) every
  // item the calls added is in the tail.
  EXPECT_EQ(f.tail_items(), added);
  return f;
}

TEST(TailRunTest, EveryLookupAndRecordConsultTheTail) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(1);
  std::vector<uint64_t> recorded, tail;
  UserFilter f = UserWithTail(p, rng, kNow, 5, &recorded, &tail);
  ASSERT_GT(f.tail_items(), 90u);
  ASSERT_LE(f.Stats(p, kNow).estimated_fp_rate, p.fp_rate() * (1 + kSlack));
  // RemoveExposed (a batch merge per run).
  ASSERT_NO_FATAL_FAILURE(ExpectNoFalseNegatives(f, p, kNow, recorded, "all"));
  // MayContain and ClaimingSlices, item by item.
  for (size_t i = 0; i < tail.size(); ++i) {
    ASSERT_TRUE(f.MayContain(p, kNow, tail[i])) << "tail item " << i;
    std::vector<int64_t> claiming;
    f.ClaimingSlices(p, kNow, tail[i], &claiming);
    ASSERT_EQ(claiming, std::vector<int64_t>{p.SliceIndexOf(kNow)});
  }
  // Record's own check: nothing in the tail (nor the main run) is new.
  const uint64_t items = f.Stats(p, kNow).items;
  const uint64_t in_tail = f.tail_items();
  EXPECT_EQ(f.Record(p, tail, kNow), 0u);
  EXPECT_EQ(f.Record(p, {recorded.data(), 300}, kNow), 0u);
  EXPECT_EQ(f.Stats(p, kNow).items, items);
  EXPECT_EQ(f.tail_items(), in_tail);
}

// The tail never passes max(kTailMinItems, main / kTailFraction) after a
// write, is merged into its run when it would (tail_items() drops to 0), and
// the slice keeps at most its run and one tail; F <= delta, no false
// negatives throughout.
TEST(TailRunTest, TheTailIsMergedWhenItPassesItsShare) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(2);
  std::vector<uint64_t> recorded, tail;
  UserFilter f = UserWithTail(p, rng, kNow, 0, &recorded, &tail);
  const uint32_t runs = RunsOfSlice(f, p, kNow, kNow);
  int merges = 0;
  uint64_t prev_tail = 0;
  for (int c = 0; c < 60; ++c) {
    const std::vector<uint64_t> h = Hashes(rng, 20, false);
    f.Record(p, h, kNow);
    recorded.insert(recorded.end(), h.begin(), h.end());
    const uint64_t items = f.Stats(p, kNow).items;
    const uint64_t in_tail = f.tail_items();
    ASSERT_LE(in_tail,
              std::max<uint64_t>(UserFilter::kTailMinItems,
                                 (items - in_tail) / UserFilter::kTailFraction))
        << "write " << c;
    if (in_tail < prev_tail) ++merges;
    prev_tail = in_tail;
    ASSERT_LE(RunsOfSlice(f, p, kNow, kNow), runs + 1) << "write " << c;
    ASSERT_LE(f.Stats(p, kNow).estimated_fp_rate, p.fp_rate() * (1 + kSlack));
    ASSERT_NO_FATAL_FAILURE(ExpectNoFalseNegatives(f, p, kNow, h, "write"));
  }
  // 1,200 items at <= ~330 per tail: at least 3 merges.
  EXPECT_GE(merges, 3);
  ASSERT_NO_FATAL_FAILURE(ExpectNoFalseNegatives(f, p, kNow, recorded, "end"));
}

// Sealing a slice merges its tail with its other open runs into the one
// sealed run: sealed slices (and the memory figures) keep one run.
TEST(TailRunTest, SealingMergesTheTail) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(3);
  const int64_t old_t = kNow - 10 * kDay;
  std::vector<uint64_t> recorded, tail;
  UserFilter f = UserWithTail(p, rng, old_t, 4, &recorded, &tail);
  ASSERT_GT(f.tail_items(), 0u);
  ASSERT_EQ(RunsOfSlice(f, p, kNow, old_t), 2u);
  // The old slice goes quiet: kQuietWrites writes elsewhere.
  for (int c = 0; c <= RunSizing::kQuietWrites; ++c) {
    const std::vector<uint64_t> h = Hashes(rng, 20, false);
    f.Record(p, h, kNow);
    recorded.insert(recorded.end(), h.begin(), h.end());
  }
  EXPECT_EQ(f.tail_items(), 0u);
  EXPECT_EQ(RunsOfSlice(f, p, kNow, old_t), 1u);
  for (const SlicePart& s : f.ToParts().slices) {
    if (s.index != p.SliceIndexOf(old_t)) continue;
    ASSERT_EQ(s.runs.size(), 1u);
    EXPECT_FALSE(s.runs[0].open) << "the old slice was not sealed";
  }
  EXPECT_LE(f.Stats(p, kNow).estimated_fp_rate, p.fp_rate() * (1 + kSlack));
  ASSERT_NO_FATAL_FAILURE(ExpectNoFalseNegatives(f, p, kNow, recorded, "end"));
}

// Parts (snapshots, GetFilter) hold the tail merged into its run, with the
// run's capacity; a filter loaded from them has no tail and loses nothing.
TEST(TailRunTest, PartsHoldTheTailMergedIntoItsRun) {
  const FilterPolicy p = DefaultPolicy();
  std::mt19937_64 rng(4);
  std::vector<uint64_t> recorded, tail;
  UserFilter f = UserWithTail(p, rng, kNow, 5, &recorded, &tail);
  ASSERT_GT(f.tail_items(), 0u);
  const uint64_t items = f.Stats(p, kNow).items;
  FilterParts parts = f.ToParts();
  ASSERT_EQ(parts.slices.size(), 1u);
  ASSERT_EQ(parts.slices[0].runs.size(), 1u);
  const RunPart& run = parts.slices[0].runs[0];
  EXPECT_TRUE(run.open);
  EXPECT_EQ(run.run.count(), items);
  EXPECT_GE(run.capacity, run.run.count());
  absl::StatusOr<UserFilter> g =
      UserFilter::FromParts(p, std::move(parts), "k");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tail_items(), 0u);
  EXPECT_EQ(g->Stats(p, kNow).items, items);
  EXPECT_DOUBLE_EQ(g->Stats(p, kNow).estimated_fp_rate,
                   f.Stats(p, kNow).estimated_fp_rate);
  ASSERT_NO_FATAL_FAILURE(
      ExpectNoFalseNegatives(*g, p, kNow, recorded, "loaded"));
  // The loaded run takes writes again (its capacity came along).
  const std::vector<uint64_t> h = Hashes(rng, 20, false);
  g->Record(p, h, kNow);
  EXPECT_EQ(RunsOfSlice(*g, p, kNow, kNow), 2u);  // the run and a new tail
}

}  // namespace
}  // namespace exposure_filter::testing
