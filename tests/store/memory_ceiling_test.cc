// The store's memory ceiling: sampled-LRU eviction of the least recently
// active users, its accounting, and what it never evicts.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using testing_util::CountRemoved;
using testing_util::IdHashes;
using testing_util::KeepMask;
using testing_util::kStartMs;
using testing_util::RecordOne;

class MemoryCeilingTest : public ::testing::Test {
 protected:
  void MakeStore(int shards) {
    absl::StatusOr<std::unique_ptr<SurfaceRegistry>> registry =
        SurfaceRegistry::Create(FilterPolicyOptions{}, {}, /*max_surfaces=*/8);
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    store_ =
        std::make_unique<ShardedFilterStore>(shards, &clock_, registry_.get());
    absl::StatusOr<const Surface*> home = registry_->GetOrCreate("homefeed");
    ASSERT_TRUE(home.ok()) << home.status();
    home_ = *home;
  }
  bool Holds(const std::string& user, uint64_t first_item) {
    return CountRemoved(
               KeepMask(*store_, *home_, user, IdHashes(first_item, 1))) == 1;
  }

  ManualClock clock_{kStartMs};
  std::unique_ptr<SurfaceRegistry> registry_;
  std::unique_ptr<ShardedFilterStore> store_;
  const Surface* home_ = nullptr;
};

TEST_F(MemoryCeilingTest, NoLimitNeverEvicts) {
  MakeStore(4);
  for (int u = 0; u < 2000; ++u) {
    RecordOne(*store_, *home_, absl::StrCat("u", u), IdHashes(u, 3));
  }
  EXPECT_EQ(store_->evictions().users, 0u);
  EXPECT_EQ(store_->Usage(1).users, 2000u);
}

TEST_F(MemoryCeilingTest, FloodOfNewUsersStaysUnderTheLimit) {
  MakeStore(16);
  // Room for roughly 1,000 small users.
  RecordOne(*store_, *home_, "probe", IdHashes(0, 3));
  const uint64_t per_user = store_->total_bytes();
  store_->SetMemoryLimit(per_user * 1000);
  for (int u = 0; u < 20000; ++u) {
    RecordOne(*store_, *home_, absl::StrCat("flood", u), IdHashes(u, 3));
    // Every shard holds many users, so each Record ends under the ceiling.
    ASSERT_LE(store_->total_bytes(), store_->memory_limit()) << "user " << u;
  }
  const StoreUsage usage = store_->Usage(registry_->All().size());
  EXPECT_EQ(usage.bytes + usage.table_slack_bytes, store_->total_bytes());
  // The tables' free slots count too, so fewer than 1,000 fit.
  EXPECT_GT(usage.users, 400u);
  EXPECT_LE(usage.users, 1000u);
  const EvictionCounts ev = store_->evictions();
  EXPECT_EQ(ev.users + usage.users, 20001u);
  EXPECT_GE(ev.bytes, ev.users * per_user);
  // The newest user is never the victim of its own Record.
  EXPECT_TRUE(Holds("flood19999", 19999));
}

TEST_F(MemoryCeilingTest, EvictsTheLeastRecentlyActiveFirst) {
  MakeStore(1);
  // 80 users: the shard's table (capacity 127) then holds its size through
  // the evict-one/insert-one churn below by rehashing in place. At 100 users
  // absl may instead double the table (whether depends on the per-process hash
  // seed), and the doubled slack would legitimately evict far more users.
  for (int u = 0; u < 80; ++u) {
    RecordOne(*store_, *home_, absl::StrCat("old", u), IdHashes(u, 3));
  }
  clock_.Advance(absl::Minutes(10));
  // Reads count as activity: these ten are recalled for, the rest idle.
  for (int u = 0; u < 10; ++u) {
    ASSERT_TRUE(Holds(absl::StrCat("old", u), u));
  }
  clock_.Advance(absl::Minutes(10));
  store_->SetMemoryLimit(store_->total_bytes());
  for (int u = 0; u < 30; ++u) {
    RecordOne(*store_, *home_, absl::StrCat("new", u), IdHashes(1000 + u, 3));
  }
  // Every user weighs the same, so each new user costs exactly one eviction.
  EXPECT_EQ(store_->evictions().users, 30u);
  // Sampled LRU is approximate: a victim is the stalest of 8 consecutive
  // hash-ordered entries, so a recently read user goes only when a sample
  // holds no idle user at all. The table holds ~81 users throughout, of
  // which >= 40 idle, so that is <= (41/81)^8 = 0.4% per eviction (< 0.05
  // expected over the 30), and a new user (the freshest) goes only when all 8
  // are new. Samples are not independent, though: new users fill the slots
  // just freed behind the sampling cursor, so its next pass meets them
  // together. Over 3,000 hash orders (user names varied) 30 new users were
  // held in 2,995 and 29 in 5; a CI run once held 28. A sampler that ignored
  // activity would evict ~5 of the 30 new users and 2-3 of the 10 read ones
  // (with the victim taken as the first sampled entry, this test failed 29
  // runs in 30), so the bounds below still fail if the sampling stops
  // preferring stale entries.
  int read_held = 0, new_held = 0, idle_held = 0;
  for (int u = 0; u < 10; ++u) read_held += Holds(absl::StrCat("old", u), u);
  for (int u = 0; u < 30; ++u) {
    new_held += Holds(absl::StrCat("new", u), 1000 + u);
  }
  for (int u = 10; u < 80; ++u) idle_held += Holds(absl::StrCat("old", u), u);
  EXPECT_GE(read_held, 7);
  EXPECT_GE(new_held, 28);
  EXPECT_EQ(read_held + new_held + idle_held, 80);
}

TEST_F(MemoryCeilingTest, AUserLargerThanTheLimitIsKeptAlone) {
  MakeStore(1);
  RecordOne(*store_, *home_, "small", IdHashes(0, 1));
  store_->SetMemoryLimit(1024);
  RecordOne(*store_, *home_, "huge", IdHashes(100, 5000));
  // Everything else goes; the user being written stays (a write is never
  // silently dropped), and the next write elsewhere evicts it.
  EXPECT_FALSE(Holds("small", 0));
  EXPECT_TRUE(Holds("huge", 4000));
  EXPECT_EQ(store_->Usage(1).users, 1u);
  EXPECT_GT(store_->total_bytes(), store_->memory_limit());
  RecordOne(*store_, *home_, "next", IdHashes(9, 1));
  EXPECT_FALSE(Holds("huge", 4000));
  EXPECT_TRUE(Holds("next", 9));
  EXPECT_EQ(store_->evictions().users, 2u);
  const StoreUsage usage = store_->Usage(1);
  EXPECT_EQ(usage.bytes + usage.table_slack_bytes, store_->total_bytes());
}

TEST_F(MemoryCeilingTest, SweepReportCountsUsersSlicesAndFpRates) {
  MakeStore(4);
  for (int u = 0; u < 50; ++u) {
    RecordOne(*store_, *home_, absl::StrCat("u", u), IdHashes(u, 20));
  }
  // A second slice for ten of them, a slice span (5 days) later.
  clock_.Advance(absl::Hours(24 * 5));
  for (int u = 0; u < 10; ++u) {
    RecordOne(*store_, *home_, absl::StrCat("u", u), IdHashes(500 + u, 5));
  }
  SweepReport report;
  EXPECT_EQ(store_->DropExpired(&report), 0u);
  ASSERT_GT(report.surfaces.size(), home_->id);
  const SweepReport::PerSurface& s = report.surfaces[home_->id];
  EXPECT_EQ(s.users, 50u);
  EXPECT_EQ(s.live_slices, 60u);
  // Cumulative buckets; every user's estimate is within the 1% target.
  EXPECT_EQ(s.users_by_fp_rate[SweepReport::kNumFpRateBounds - 1], 50u);
  size_t one_percent = 0;
  while (SweepReport::kFpRateBounds[one_percent] < 0.01) ++one_percent;
  EXPECT_EQ(s.users_by_fp_rate[one_percent], 50u);
  for (size_t i = 1; i < SweepReport::kNumFpRateBounds; ++i) {
    EXPECT_LE(s.users_by_fp_rate[i - 1], s.users_by_fp_rate[i]);
  }
}

}  // namespace
}  // namespace exposure_filter
