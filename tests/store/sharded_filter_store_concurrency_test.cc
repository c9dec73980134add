// Many threads on overlapping users: every store operation at once, then the
// invariants that must survive any interleaving. Built with
// -DEF_SANITIZE=thread this is the store's data-race test, so it favours many
// short, mixed operations on few shards over volume.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exposure_filter/filter_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using ::testing::Each;
using ::testing::Eq;
using testing_util::IdHashes;
using testing_util::KeepMask;
using testing_util::kStartMs;
using testing_util::RecordOne;

constexpr int kThreads = 8;
constexpr int kIterations = 300;
constexpr int kBatch = 16;
// Users never deleted (checked for false negatives at the end) and users that
// are deleted and re-created all the time; fewer than threads, so they collide.
constexpr int kKeptUsers = 6;
constexpr int kChurnUsers = 4;
// Thread 0 moves the clock this much per iteration: 300 * 50ms = 15s, far
// past the "short" surface's window (2s + 1s slices) and nothing for the
// default 30-day one.
constexpr absl::Duration kTick = absl::Milliseconds(50);

std::string KeptUser(int k) { return absl::StrCat("kept-", k); }
std::string ChurnUser(int k) { return absl::StrCat("churn-", k); }
// Ids are unique per (thread, iteration, j).
uint64_t FirstId(int thread, int iteration) {
  return (uint64_t{1} << 40) * (thread + 1) + uint64_t{kBatch} * iteration;
}

struct ThreadLog {
  // (kept user index, first id of a recorded batch).
  std::vector<std::pair<int, uint64_t>> recorded;
};

struct Violations {
  std::atomic<int> false_negatives{0};
  std::atomic<int> filter_misses{0};
  std::atomic<int> bad_filters{0};
  std::atomic<int> missing_stats{0};
  std::atomic<int> usage_mismatches{0};
};

void Worker(int t, ShardedFilterStore& store, ManualClock& clock,
            const Surface& home, const Surface& short_lived, ThreadLog& log,
            Violations& v) {
  for (int i = 0; i < kIterations; ++i) {
    const int kept_index = (t * 5 + i) % kKeptUsers;
    const std::string kept = KeptUser(kept_index);
    const std::string churn = ChurnUser((t + i) % kChurnUsers);
    const uint64_t first = FirstId(t, i);
    const std::vector<uint64_t> items = IdHashes(first, kBatch);

    RecordOne(store, home, kept, items);
    log.recorded.emplace_back(kept_index, first);
    // Once Record returns, every reader must see the items.
    for (uint8_t k : KeepMask(store, home, kept, items)) {
      if (k != 0) v.false_negatives.fetch_add(1);
    }
    RecordOne(store, home, churn, items);
    RecordOne(store, short_lived, churn, items);

    switch (i % 5) {
      case 0:
        store.DeleteUser(home, churn);
        break;
      case 1: {
        const FilterPull pull = store.GetFilter(&home, home.policy, kept, "");
        absl::StatusOr<FilterView> view = FilterView::Parse(pull.bytes);
        if (!view.ok()) {
          v.bad_filters.fetch_add(1);
        } else if (!view->MayContainId(first) ||
                   !view->MayContainId(first + kBatch - 1)) {
          v.filter_misses.fetch_add(1);
        }
        // Others may have changed the filter since: only the shape is fixed.
        if (store.GetFilter(&home, home.policy, kept, pull.version)
                .version.size() != 16) {
          v.bad_filters.fetch_add(1);
        }
        break;
      }
      case 2:
        store.DropExpired();
        break;
      case 3: {
        const StoreUsage usage = store.Usage(2);
        uint64_t users = 0, bytes = 0;
        for (const ShardUsage& s : usage.surfaces) {
          users += s.users;
          bytes += s.bytes;
        }
        if (users != usage.users || bytes != usage.bytes) {
          v.usage_mismatches.fetch_add(1);
        }
        break;
      }
      case 4:
        if (!store.GetUserStats(home, kept).has_value()) {
          v.missing_stats.fetch_add(1);
        }
        store.DeleteUser(short_lived, churn);
        break;
    }
    if (t == 0) clock.Advance(kTick);
  }
}

TEST(ShardedFilterStoreConcurrencyTest, MixedOperationsKeepInvariants) {
  FilterPolicyOptions short_opts;
  short_opts.retention = absl::Seconds(2);
  short_opts.slice_span = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<SurfaceRegistry>> registry =
      SurfaceRegistry::Create(FilterPolicyOptions{}, {{"short", short_opts}},
                              /*max_surfaces=*/4);
  ASSERT_TRUE(registry.ok()) << registry.status();
  const Surface& home = **(*registry)->GetOrCreate("homefeed");
  const Surface& short_lived = **(*registry)->GetOrCreate("short");
  ASSERT_EQ(short_lived.policy.retention_ms(), 2000);
  ManualClock clock(kStartMs);
  // Few shards: more users per lock, more contention.
  ShardedFilterStore store(4, &clock, registry->get());

  std::vector<ThreadLog> logs(kThreads);
  Violations v;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(Worker, t, std::ref(store), std::ref(clock),
                         std::cref(home), std::cref(short_lived),
                         std::ref(logs[t]), std::ref(v));
  }
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(v.false_negatives.load(), 0);
  EXPECT_EQ(v.filter_misses.load(), 0);
  EXPECT_EQ(v.bad_filters.load(), 0);
  EXPECT_EQ(v.missing_stats.load(), 0);
  EXPECT_EQ(v.usage_mismatches.load(), 0);

  // No false negatives for users never deleted, over everything recorded.
  for (const ThreadLog& log : logs) {
    for (const auto& [user, first] : log.recorded) {
      EXPECT_THAT(
          KeepMask(store, home, KeptUser(user), IdHashes(first, kBatch)),
          Each(Eq(0)))
          << KeptUser(user) << " first id " << first;
    }
  }

  // Sweep the short surface's leftovers; the default surface is untouched.
  clock.Advance(absl::Seconds(3));
  store.DropExpired();
  StoreUsage usage = store.Usage(2);
  EXPECT_EQ(usage.surfaces[short_lived.id].users, 0u);
  EXPECT_EQ(usage.surfaces[short_lived.id].bytes, 0u);

  // The accounting matches the users actually held, byte for byte.
  uint64_t users = 0, bytes = 0;
  for (int k = 0; k < kKeptUsers; ++k) {
    std::optional<UserFilterStats> stats =
        store.GetUserStats(home, KeptUser(k));
    ASSERT_TRUE(stats.has_value()) << KeptUser(k);
    ++users;
    bytes += stats->bytes;
  }
  for (int k = 0; k < kChurnUsers; ++k) {
    if (auto stats = store.GetUserStats(home, ChurnUser(k))) {
      ++users;
      bytes += stats->bytes;
    }
  }
  EXPECT_EQ(usage.users, users);
  EXPECT_EQ(usage.bytes, bytes);
  uint64_t shard_users = 0, shard_bytes = 0;
  for (const ShardUsage& s : usage.shards) {
    shard_users += s.users;
    shard_bytes += s.bytes;
  }
  EXPECT_EQ(shard_users, usage.users);
  EXPECT_EQ(shard_bytes, usage.bytes);

  // Deleting everyone returns every accounted byte.
  for (int k = 0; k < kKeptUsers; ++k) {
    EXPECT_TRUE(store.DeleteUser(home, KeptUser(k)));
  }
  for (int k = 0; k < kChurnUsers; ++k) store.DeleteUser(home, ChurnUser(k));
  usage = store.Usage(2);
  EXPECT_EQ(usage.users, 0u);
  EXPECT_EQ(usage.bytes, 0u);
}

}  // namespace
}  // namespace exposure_filter
