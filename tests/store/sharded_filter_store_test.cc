#include "src/store/sharded_filter_store.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "exposure_filter/filter_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/filter/run_sizing.h"
#include "src/store/clock.h"
#include "src/store/surface_registry.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using ::testing::Each;
using ::testing::Eq;
using testing_util::CountRemoved;
using testing_util::IdHashes;
using testing_util::KeepMask;
using testing_util::kStartMs;
using testing_util::RecordOne;

// Every test runs with one shard (all users share a lock and a map) and with
// 64 (users spread out), the two ends of the shard-selection code.
class ShardedFilterStoreTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<SurfaceRegistry>> registry =
        SurfaceRegistry::Create(FilterPolicyOptions{}, {}, /*max_surfaces=*/8);
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    store_ = std::make_unique<ShardedFilterStore>(GetParam(), &clock_,
                                                  registry_.get());
    absl::StatusOr<const Surface*> home = registry_->GetOrCreate("homefeed");
    ASSERT_TRUE(home.ok()) << home.status();
    home_ = *home;
  }

  const FilterPolicy& policy() const { return home_->policy; }
  StoreUsage Usage() const { return store_->Usage(registry_->All().size()); }

  ManualClock clock_{kStartMs};
  std::unique_ptr<SurfaceRegistry> registry_;
  std::unique_ptr<ShardedFilterStore> store_;
  const Surface* home_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Shards, ShardedFilterStoreTest,
                         ::testing::Values(1, 64),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "shards");
                         });

TEST_P(ShardedFilterStoreTest, ReportsItsShardCount) {
  EXPECT_EQ(store_->num_shards(), GetParam());
  EXPECT_EQ(Usage().shards.size(), static_cast<size_t>(GetParam()));
}

TEST_P(ShardedFilterStoreTest, RecordedItemsAreAlwaysRemoved) {
  constexpr int kUsers = 20;
  constexpr int kItems = 1000;
  for (int u = 0; u < kUsers; ++u) {
    const RecordCounts counts =
        RecordOne(*store_, *home_, absl::StrCat("user-", u),
                  IdHashes(uint64_t{1000000} * u, kItems));
    EXPECT_EQ(counts.recorded, uint64_t{kItems});
    EXPECT_EQ(counts.expired, 0u);
  }
  int fresh_removed = 0;
  for (int u = 0; u < kUsers; ++u) {
    const std::string user = absl::StrCat("user-", u);
    // Zero false negatives: every recorded item is removed.
    EXPECT_THAT(KeepMask(*store_, *home_, user,
                         IdHashes(uint64_t{1000000} * u, kItems)),
                Each(Eq(0)))
        << user;
    // The next user's items were never shown to this one: only false
    // positives may remove them.
    fresh_removed += CountRemoved(
        KeepMask(*store_, *home_, user,
                 IdHashes(uint64_t{1000000} * ((u + 1) % kUsers), kItems)));
  }
  // Target 1%; 3% is > 10 standard deviations above it for 20,000 probes.
  EXPECT_LT(fresh_removed, kUsers * kItems * 3 / 100);
}

TEST_P(ShardedFilterStoreTest, UnknownUserKeepsEveryCandidate) {
  RecordOne(*store_, *home_, "known", IdHashes(1, 100));
  EXPECT_THAT(KeepMask(*store_, *home_, "unknown", IdHashes(1, 100)),
              Each(Eq(1)));
}

TEST_P(ShardedFilterStoreTest, RemoveExposedLeavesClearedEntriesAlone) {
  const std::vector<uint64_t> fresh = IdHashes(500, 4);
  std::vector<uint8_t> keep = {1, 0, 1, 0};
  store_->RemoveExposed(*home_, "nobody", fresh, keep.data());
  EXPECT_EQ(keep, (std::vector<uint8_t>{1, 0, 1, 0}));
}

TEST_P(ShardedFilterStoreTest, SurfacesAreSeparate) {
  const Surface* video = *registry_->GetOrCreate("video");
  const std::vector<uint64_t> items = IdHashes(7, 200);
  RecordOne(*store_, *home_, "alice", items);
  EXPECT_THAT(KeepMask(*store_, *home_, "alice", items), Each(Eq(0)));
  EXPECT_THAT(KeepMask(*store_, *video, "alice", items), Each(Eq(1)));
  EXPECT_FALSE(store_->GetUserStats(*video, "alice").has_value());

  const StoreUsage usage = Usage();
  EXPECT_EQ(usage.users, 1u);
  EXPECT_EQ(usage.surfaces[home_->id].users, 1u);
  EXPECT_EQ(usage.surfaces[video->id].users, 0u);

  // Deleting on one surface leaves the other alone.
  RecordOne(*store_, *video, "alice", IdHashes(9000, 10));
  EXPECT_TRUE(store_->DeleteUser(*video, "alice"));
  EXPECT_THAT(KeepMask(*store_, *home_, "alice", items), Each(Eq(0)));
}

TEST_P(ShardedFilterStoreTest, DeleteUserReportsExistenceAndFreesBytes) {
  RecordOne(*store_, *home_, "alice", IdHashes(1, 300));
  RecordOne(*store_, *home_, "bob", IdHashes(1, 5));
  // A long user id lives outside the string's inline buffer and is accounted.
  const std::string long_id(100, 'x');
  RecordOne(*store_, *home_, long_id, IdHashes(1, 5));
  StoreUsage usage = Usage();
  EXPECT_EQ(usage.users, 3u);
  EXPECT_GT(usage.bytes, 0u);

  EXPECT_TRUE(store_->DeleteUser(*home_, "alice"));
  EXPECT_FALSE(store_->DeleteUser(*home_, "alice"));
  EXPECT_FALSE(store_->DeleteUser(*home_, "never-seen"));
  EXPECT_THAT(KeepMask(*store_, *home_, "alice", IdHashes(1, 300)),
              Each(Eq(1)));
  EXPECT_EQ(Usage().users, 2u);

  EXPECT_TRUE(store_->DeleteUser(*home_, "bob"));
  EXPECT_TRUE(store_->DeleteUser(*home_, long_id));
  usage = Usage();
  EXPECT_EQ(usage.users, 0u);
  EXPECT_EQ(usage.bytes, 0u);
  EXPECT_EQ(usage.surfaces[home_->id].users, 0u);
  EXPECT_EQ(usage.surfaces[home_->id].bytes, 0u);
}

TEST_P(ShardedFilterStoreTest, ExpiredEventsAreCountedAndNotRecorded) {
  const int64_t now = clock_.NowMs();
  const int64_t cutoff = now - policy().retention_ms();
  // The spans in UserExposures point into these.
  const std::vector<uint64_t> old_items = IdHashes(1, 10);
  const std::vector<uint64_t> edge_items = IdHashes(100, 3);
  const std::vector<uint64_t> bob_items = IdHashes(200, 4);
  const std::vector<uint64_t> carol_items = IdHashes(300, 5);
  const UserExposures live_batch[] = {
      {"alice", old_items, cutoff - 1},
      {"alice", edge_items, cutoff},
      {"bob", bob_items, 0},
      {"carol", carol_items, cutoff - 86'400'000},
  };
  const RecordCounts counts = store_->Record(*home_, live_batch);
  EXPECT_EQ(counts.recorded, 7u);
  EXPECT_EQ(counts.expired, 15u);

  EXPECT_THAT(KeepMask(*store_, *home_, "alice", edge_items), Each(Eq(0)));
  EXPECT_EQ(CountRemoved(KeepMask(*store_, *home_, "alice", old_items)), 0);
  // A user whose only exposures expired is not created.
  EXPECT_FALSE(store_->GetUserStats(*home_, "carol").has_value());
  EXPECT_EQ(Usage().users, 2u);
}

TEST_P(ShardedFilterStoreTest, EmptyItemListsCreateNothing) {
  const UserExposures ue{"alice", {}, 0};
  const RecordCounts counts = store_->Record(*home_, {&ue, 1});
  EXPECT_EQ(counts.recorded, 0u);
  EXPECT_EQ(Usage().users, 0u);
}

TEST_P(ShardedFilterStoreTest, EventsSlightlyInTheFutureAreRecordedNow) {
  const std::vector<uint64_t> items = IdHashes(42, 20);
  const RecordCounts counts =
      RecordOne(*store_, *home_, "alice", items, clock_.NowMs() + 60'000);
  EXPECT_EQ(counts.recorded, 20u);
  EXPECT_THAT(KeepMask(*store_, *home_, "alice", items), Each(Eq(0)));
  std::optional<UserFilterStats> stats = store_->GetUserStats(*home_, "alice");
  ASSERT_TRUE(stats.has_value());
  // Clamped to the server's now.
  EXPECT_EQ(stats->newest_exposure_ms, clock_.NowMs());
}

// The map entry is one pointer (plus a control byte); the user id lives
// once, inside the filter's single allocation (user_filter.h).
TEST_P(ShardedFilterStoreTest, ATinyUserCostsOneBlockPlusPackedTablesAllIn) {
  RecordOne(*store_, *home_, "user-1234", IdHashes(5, 20));
  std::optional<UserFilterStats> stats =
      store_->GetUserStats(*home_, "user-1234");
  ASSERT_TRUE(stats.has_value());
  // Format 2: 20 items in one run of 2^17 (~36 B of codes),
  // the 11-byte key, ~20 B of varint tables and the 16-byte header, in one
  // allocation; all-in with the map slot under the light user's 100 B
  // target (docs/format2-design.md, "Sizing policy").
  EXPECT_EQ(ShardedFilterStore::EntryOverheadBytes(), sizeof(void*) + 1);
  EXPECT_LE(stats->bytes, 100u);
  EXPECT_GE(stats->bytes, 16u + 11 + 36 + sizeof(void*) + 1);
  EXPECT_EQ(Usage().bytes, stats->bytes);
}

TEST_P(ShardedFilterStoreTest, UsersWithLongAndSimilarIdsStayDistinct) {
  const std::string long_id(300, 'u');
  const std::vector<std::string> ids = {"a", "ab", long_id, long_id + "v",
                                        std::string("n\0ul", 4)};
  for (size_t i = 0; i < ids.size(); ++i) {
    RecordOne(*store_, *home_, ids[i], IdHashes(100 * i, 10));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(
        CountRemoved(KeepMask(*store_, *home_, ids[i], IdHashes(100 * i, 10))),
        10)
        << i;
    std::optional<UserFilterStats> stats = store_->GetUserStats(*home_, ids[i]);
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(stats->items, 10u);
  }
  EXPECT_EQ(Usage().users, ids.size());
  EXPECT_TRUE(store_->DeleteUser(*home_, long_id));
  EXPECT_FALSE(store_->GetUserStats(*home_, long_id).has_value());
  EXPECT_TRUE(store_->GetUserStats(*home_, long_id + "v").has_value());
}

TEST_P(ShardedFilterStoreTest, HistoryAgesOutAfterRetentionPlusSliceSpan) {
  const std::vector<uint64_t> items = IdHashes(1, 50);
  RecordOne(*store_, *home_, "alice", items);
  ASSERT_GT(Usage().bytes, 0u);

  // Remembered for at least the retention window...
  clock_.Advance(absl::Milliseconds(policy().retention_ms()));
  EXPECT_THAT(KeepMask(*store_, *home_, "alice", items), Each(Eq(0)));
  EXPECT_EQ(store_->DropExpired(), 0u);

  // ...and at most retention + one slice span.
  clock_.Advance(absl::Milliseconds(policy().slice_span_ms()));
  EXPECT_THAT(KeepMask(*store_, *home_, "alice", items), Each(Eq(1)));
  EXPECT_FALSE(store_->GetUserStats(*home_, "alice").has_value());
  // Aged out but not yet swept: the memory is still held and accounted.
  EXPECT_EQ(Usage().users, 1u);

  EXPECT_EQ(store_->DropExpired(), 1u);
  const StoreUsage usage = Usage();
  EXPECT_EQ(usage.users, 0u);
  EXPECT_EQ(usage.bytes, 0u);
  EXPECT_EQ(usage.surfaces[home_->id].bytes, 0u);
  EXPECT_EQ(store_->DropExpired(), 0u);
}

// The sweeper seals the open slices of a user idle for
// RunSizing::kIdleSealMs (UserFilter::SealIdle), accounts the smaller
// filter, and forgets nothing.
TEST_P(ShardedFilterStoreTest, TheSweeperSealsAnIdleUserAndAccountsIt) {
  std::vector<uint64_t> all;
  constexpr int kCalls = 100;
  constexpr int64_t kDayMs = 24 * 3600 * 1000LL;
  for (int c = 0; c < kCalls; ++c) {
    const std::vector<uint64_t> items = IdHashes(c * 20, 20);
    RecordOne(*store_, *home_, "alice", items,
              kStartMs - 20 * kDayMs + 20 * kDayMs * c / kCalls);
    all.insert(all.end(), items.begin(), items.end());
  }
  const uint64_t written = Usage().bytes;
  EXPECT_EQ(store_->DropExpired(), 0u);  // not idle yet: unchanged
  EXPECT_EQ(Usage().bytes, written);
  // Idle, and past the newest slice's span (SealIdle leaves a newest slice
  // open until then: the user may still write to it). Written over 20 days,
  // so that the up to 5 days this takes age out no slice.
  const int64_t last =
      kStartMs - 20 * kDayMs + 20 * kDayMs * (kCalls - 1) / kCalls;
  const int64_t newest_end = policy().SliceEndMs(policy().SliceIndexOf(last));
  clock_.Advance(absl::Milliseconds(
      std::max<int64_t>(RunSizing::kIdleSealMs, newest_end - clock_.NowMs())));
  EXPECT_EQ(store_->DropExpired(), 0u);
  const uint64_t idle = Usage().bytes;
  EXPECT_LT(idle, written);
  EXPECT_EQ(Usage().surfaces[home_->id].bytes, idle);
  const std::optional<UserFilterStats> stats =
      store_->GetUserStats(*home_, "alice");
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->bytes, idle);
  EXPECT_LE(stats->estimated_fp_rate, policy().fp_rate());
  EXPECT_THAT(KeepMask(*store_, *home_, "alice", all), Each(Eq(0)));
}

TEST_P(ShardedFilterStoreTest, DropExpiredKeepsUsersWithLiveSlices) {
  RecordOne(*store_, *home_, "old", IdHashes(1, 10));
  // "both" has an old slice and, after the clock moves, a recent one.
  RecordOne(*store_, *home_, "both", IdHashes(100, 10));
  clock_.Advance(absl::Milliseconds(policy().retention_ms()));
  const std::vector<uint64_t> recent = IdHashes(200, 10);
  RecordOne(*store_, *home_, "both", recent);
  RecordOne(*store_, *home_, "new", recent);
  clock_.Advance(absl::Milliseconds(policy().slice_span_ms()));

  EXPECT_EQ(store_->DropExpired(), 1u);  // only "old"
  EXPECT_THAT(KeepMask(*store_, *home_, "both", recent), Each(Eq(0)));
  std::optional<UserFilterStats> both = store_->GetUserStats(*home_, "both");
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->slices, 1u);

  // The accounted bytes are exactly what the remaining users hold.
  std::optional<UserFilterStats> fresh = store_->GetUserStats(*home_, "new");
  ASSERT_TRUE(fresh.has_value());
  const StoreUsage usage = Usage();
  EXPECT_EQ(usage.users, 2u);
  EXPECT_EQ(usage.bytes, both->bytes + fresh->bytes);
}

TEST_P(ShardedFilterStoreTest, RecordDropsTheUsersAgedOutSlices) {
  RecordOne(*store_, *home_, "alice", IdHashes(1, 500));
  clock_.Advance(
      absl::Milliseconds(policy().retention_ms() + policy().slice_span_ms()));
  RecordOne(*store_, *home_, "alice", IdHashes(1000, 5));
  std::optional<UserFilterStats> stats = store_->GetUserStats(*home_, "alice");
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->slices, 1u);
  EXPECT_EQ(Usage().bytes, stats->bytes);
}

TEST_P(ShardedFilterStoreTest, GetFilterVersionIsStableAcrossCalls) {
  RecordOne(*store_, *home_, "alice", IdHashes(1, 30));
  const FilterPull a = store_->GetFilter(home_, policy(), "alice", "");
  const FilterPull b = store_->GetFilter(home_, policy(), "alice", "");
  EXPECT_FALSE(a.not_modified);
  EXPECT_EQ(a.version.size(), 16u);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.bytes, b.bytes);
  // The version is the format's checksum, in hex.
  absl::StatusOr<FilterView> view = FilterView::Parse(a.bytes);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(a.version, absl::StrFormat("%016x", view->checksum()));
  for (uint64_t id = 1; id <= 30; ++id) EXPECT_TRUE(view->MayContainId(id));
}

TEST_P(ShardedFilterStoreTest, GetFilterVersionChangesAfterRecord) {
  RecordOne(*store_, *home_, "alice", IdHashes(1, 30));
  const FilterPull before = store_->GetFilter(home_, policy(), "alice", "");
  // Re-recording what is already there changes nothing (at-least-once
  // delivery is harmless).
  RecordOne(*store_, *home_, "alice", IdHashes(1, 30));
  EXPECT_EQ(store_->GetFilter(home_, policy(), "alice", "").version,
            before.version);
  RecordOne(*store_, *home_, "alice", IdHashes(31, 1));
  EXPECT_NE(store_->GetFilter(home_, policy(), "alice", "").version,
            before.version);
}

TEST_P(ShardedFilterStoreTest, GetFilterVersionChangesWhenASliceExpires) {
  RecordOne(*store_, *home_, "alice", IdHashes(1, 10));
  const int64_t first_slice_end =
      policy().SliceEndMs(policy().SliceIndexOf(clock_.NowMs()));
  clock_.Set(first_slice_end);  // the next slice
  RecordOne(*store_, *home_, "alice", IdHashes(100, 10));
  const FilterPull two_slices = store_->GetFilter(home_, policy(), "alice", "");
  absl::StatusOr<FilterView> before = FilterView::Parse(two_slices.bytes);
  ASSERT_TRUE(before.ok()) << before.status();
  // Two slices, each holding its ten items in runs (the server writes no
  // Bloom segments).
  ASSERT_EQ(before->slices().size(), 2u);
  ASSERT_EQ(before->segments().size(), 0u);
  ASSERT_GE(before->runs().size(), 2u);

  // Nothing was recorded, but the first slice leaves the window.
  clock_.Set(first_slice_end + policy().retention_ms());
  const FilterPull one_slice = store_->GetFilter(home_, policy(), "alice", "");
  EXPECT_NE(one_slice.version, two_slices.version);
  absl::StatusOr<FilterView> view = FilterView::Parse(one_slice.bytes);
  ASSERT_TRUE(view.ok()) << view.status();
  // docs/filter-format.md, "Checksum and version": a slice aging out
  // changes the bytes and so the version, without any write.
  ASSERT_EQ(view->slices().size(), 1u);
  EXPECT_EQ(view->slices()[0].start_ms,
            policy().SliceStartMs(policy().SliceIndexOf(first_slice_end)));
  for (uint64_t id = 100; id < 110; ++id) EXPECT_TRUE(view->MayContainId(id));
  // An if_version from before the expiry is stale.
  EXPECT_FALSE(store_->GetFilter(home_, policy(), "alice", two_slices.version)
                   .not_modified);
}

TEST_P(ShardedFilterStoreTest, GetFilterNotModifiedWhenIfVersionMatches) {
  RecordOne(*store_, *home_, "alice", IdHashes(1, 30));
  const FilterPull full = store_->GetFilter(home_, policy(), "alice", "");
  const FilterPull same =
      store_->GetFilter(home_, policy(), "alice", full.version);
  EXPECT_TRUE(same.not_modified);
  EXPECT_EQ(same.version, full.version);
  EXPECT_TRUE(same.bytes.empty());

  const FilterPull stale =
      store_->GetFilter(home_, policy(), "alice", "0000000000000000");
  EXPECT_FALSE(stale.not_modified);
  EXPECT_EQ(stale.version, full.version);
  EXPECT_EQ(stale.bytes, full.bytes);
}

TEST_P(ShardedFilterStoreTest, UnknownUsersGetTheSameEmptyFilter) {
  // Null surface: never written. Unknown user on a known surface. A user
  // whose history aged out. All three are "no live slices".
  const FilterPull no_surface = store_->GetFilter(nullptr, policy(), "x", "");
  const FilterPull unknown = store_->GetFilter(home_, policy(), "x", "");
  RecordOne(*store_, *home_, "aged", IdHashes(1, 10));
  clock_.Advance(
      absl::Milliseconds(policy().retention_ms() + policy().slice_span_ms()));
  const FilterPull aged = store_->GetFilter(home_, policy(), "aged", "");

  EXPECT_EQ(no_surface.version, unknown.version);
  EXPECT_EQ(aged.version, unknown.version);
  absl::StatusOr<FilterView> view = FilterView::Parse(no_surface.bytes);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(view->segments().empty());
  EXPECT_FALSE(view->MayContainId(1));
  EXPECT_TRUE(store_->GetFilter(nullptr, policy(), "x", no_surface.version)
                  .not_modified);
}

TEST_P(ShardedFilterStoreTest, GetUserStatsIsNulloptForUnknownUser) {
  EXPECT_FALSE(store_->GetUserStats(*home_, "nobody").has_value());
}

TEST_P(ShardedFilterStoreTest, GetUserStatsDescribesAKnownUser) {
  constexpr int kItems = 100;
  const int64_t event = clock_.NowMs() - 3'600'000;  // an hour ago
  RecordOne(*store_, *home_, "alice", IdHashes(1, kItems), event);
  std::optional<UserFilterStats> stats = store_->GetUserStats(*home_, "alice");
  ASSERT_TRUE(stats.has_value());
  // "items" counts bits claimed: an item whose bits a previous one already
  // set (a false positive on insert) is not counted again.
  EXPECT_LE(stats->items, uint64_t{kItems});
  EXPECT_GE(stats->items, uint64_t{kItems * 95 / 100});
  EXPECT_EQ(stats->slices, 1u);
  EXPECT_GE(stats->segments, 1u);
  EXPECT_GT(stats->bytes, 0u);
  EXPECT_GT(stats->estimated_fp_rate, 0.0);
  EXPECT_LT(stats->estimated_fp_rate, policy().fp_rate());
  EXPECT_EQ(stats->oldest_exposure_ms, event);
  EXPECT_EQ(stats->newest_exposure_ms, event);
  ASSERT_EQ(stats->slice_stats.size(), 1u);
  const SliceStats& slice = stats->slice_stats[0];
  EXPECT_LE(slice.start_ms, event);
  EXPECT_GT(slice.end_ms, event);
  EXPECT_EQ(slice.end_ms - slice.start_ms, policy().slice_span_ms());
  EXPECT_EQ(stats->expires_at_ms, slice.end_ms + policy().retention_ms());
  EXPECT_GE(slice.capacity, slice.items);
  // The stats' bytes are exactly what the store accounts for this user.
  EXPECT_EQ(stats->bytes, Usage().bytes);
}

TEST_P(ShardedFilterStoreTest, UsageSumsOverShardsAndSurfaces) {
  const Surface* video = *registry_->GetOrCreate("video");
  for (int u = 0; u < 200; ++u) {
    RecordOne(*store_, *home_, absl::StrCat("h", u), IdHashes(u, 1 + u % 7));
    if (u % 3 == 0) {
      RecordOne(*store_, *video, absl::StrCat("v", u), IdHashes(u, 40));
    }
  }
  const StoreUsage usage = Usage();
  ASSERT_EQ(usage.shards.size(), static_cast<size_t>(GetParam()));
  ASSERT_EQ(usage.surfaces.size(), 2u);
  uint64_t shard_users = 0, shard_bytes = 0;
  for (const ShardUsage& s : usage.shards) {
    shard_users += s.users;
    shard_bytes += s.bytes;
  }
  EXPECT_EQ(usage.users, 200u + 67u);
  EXPECT_EQ(shard_users, usage.users);
  EXPECT_EQ(shard_bytes, usage.bytes);
  EXPECT_EQ(usage.surfaces[home_->id].users, 200u);
  EXPECT_EQ(usage.surfaces[video->id].users, 67u);
  EXPECT_EQ(usage.surfaces[home_->id].bytes + usage.surfaces[video->id].bytes,
            usage.bytes);
  if (GetParam() > 1) {
    // 267 users over 64 shards: the hash spreads them.
    int used = 0;
    for (const ShardUsage& s : usage.shards) used += s.users > 0;
    EXPECT_GT(used, GetParam() / 2);
  }

  uint64_t stats_bytes = 0;
  for (int u = 0; u < 200; ++u) {
    stats_bytes += store_->GetUserStats(*home_, absl::StrCat("h", u))->bytes;
  }
  EXPECT_EQ(stats_bytes, usage.surfaces[home_->id].bytes);
}

}  // namespace
}  // namespace exposure_filter
