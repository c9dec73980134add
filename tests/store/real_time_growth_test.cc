// Issue 15's spread users growing in real time through the store: 2,000 items
// over 29 days in 3-4 sessions a day at random hours
// (tests/common/session_schedule.h), the store's clock following the event
// times and its sweeper (DropExpired) running every minute of it, as the
// server's default sweep_interval does, so idle hours between sessions seal
// open slices (UserFilter::SealIdle) while the user is still growing. At
// every moment of that growth (after every write and every sweep): F within
// delta, no recorded item missed, and the bytes a reader of GetUserStats
// sees within the ceiling below. Fixed seeds, deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "exposure_filter/item_hash.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"
#include "tests/common/session_schedule.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDayMs = 24 * 3600 * 1000LL;
// As bench/memory_bench's "now": 2026-11-22T03:00Z, inside a 5-day slice.
constexpr int64_t kEndMs = 1795392000000LL + 3 * 3600 * 1000LL;
constexpr int64_t kSweepMs = 60'000;
constexpr int kUsers = 4;

// Calls visit(filter) with the stored filter of `user`, without touching
// its last-active time.
void VisitUser(const ShardedFilterStore& store, absl::string_view user,
               absl::FunctionRef<void(const UserFilter&)> visit) {
  for (int shard = 0; shard < store.num_shards(); ++shard) {
    store.VisitShard(
        shard, [&](const Surface&, absl::string_view id, const UserFilter& f) {
          if (id == user) visit(f);
        });
  }
}

struct Growth {
  double mean_peak_bytes = 0;  // mean over users of each one's largest bytes
  double mean_end_bytes = 0;   // after the last write and 2 h of sweeps
};

// Replays kUsers users of `per_call` items per call in real time; asserts
// the invariants at every moment (the caller checks the bytes).
void GrowInRealTime(size_t per_call, Growth* g) {
  const int64_t start = kEndMs - 29 * kDayMs;
  ManualClock clock(start);
  auto registry = *SurfaceRegistry::Create(FilterPolicyOptions{}, {}, 8);
  ShardedFilterStore store(8, &clock, registry.get());
  const Surface& surface = **registry->GetOrCreate("homefeed");
  const double delta = surface.policy.fp_rate();

  struct Event {
    int64_t t;
    int user;
  };
  std::vector<Event> events;
  std::vector<std::mt19937_64> item_rng;
  for (int u = 0; u < kUsers; ++u) {
    std::mt19937_64 rng(1000 + u);
    for (int64_t t : testing::SessionCallTimes(testing::SessionSchedule{},
                                               start, 2000 / per_call, rng)) {
      events.push_back({t, u});
    }
    item_rng.emplace_back(7000 + u);
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.t < b.t; });

  std::vector<std::vector<uint64_t>> recorded(kUsers);
  std::vector<double> peak(kUsers, 0);
  auto id = [](int u) { return "u" + std::to_string(u); };
  // F <= delta and every recorded item claimed, for user u now.
  auto check = [&](int u, const char* when) {
    if (recorded[u].empty()) return;
    const std::optional<UserFilterStats> stats =
        store.GetUserStats(surface, id(u));
    ASSERT_TRUE(stats.has_value()) << when;
    ASSERT_LE(stats->estimated_fp_rate, delta)
        << "user " << u << " " << when << " at " << clock.NowMs();
    peak[u] = std::max(peak[u], static_cast<double>(stats->bytes));
    // Through the stored filter, not the store's RemoveExposed: a read
    // would mark the user active and no idle seal would ever run.
    std::vector<uint8_t> keep(recorded[u].size(), 1);
    VisitUser(store, id(u), [&](const UserFilter& f) {
      f.RemoveExposed(surface.policy, clock.NowMs(), recorded[u], keep.data());
    });
    ASSERT_EQ(std::count(keep.begin(), keep.end(), 1), 0)
        << "false negatives, user " << u << " " << when;
  };
  int64_t next_sweep = start + kSweepMs;
  auto sweep_until = [&](int64_t t) {
    for (; next_sweep <= t; next_sweep += kSweepMs) {
      clock.Advance(absl::Milliseconds(next_sweep - clock.NowMs()));
      store.DropExpired();
      for (int u = 0; u < kUsers; ++u) {
        ASSERT_NO_FATAL_FAILURE(check(u, "after a sweep"));
      }
    }
  };
  for (const Event& e : events) {
    ASSERT_NO_FATAL_FAILURE(sweep_until(e.t));
    clock.Advance(absl::Milliseconds(e.t - clock.NowMs()));
    std::vector<uint64_t> items(per_call);
    for (uint64_t& h : items) h = HashItemId(item_rng[e.user]());
    const std::string user = id(e.user);
    const UserExposures ue{user, items, e.t};
    store.Record(surface, {&ue, 1});
    recorded[e.user].insert(recorded[e.user].end(), items.begin(), items.end());
    ASSERT_NO_FATAL_FAILURE(check(e.user, "after a write"));
  }
  ASSERT_NO_FATAL_FAILURE(sweep_until(clock.NowMs() + 2 * 3600 * 1000));
  for (int u = 0; u < kUsers; ++u) {
    g->mean_peak_bytes += peak[u] / kUsers;
    g->mean_end_bytes +=
        static_cast<double>(store.GetUserStats(surface, id(u))->bytes) / kUsers;
  }
}

// Ceilings: issue 15's target is 2,888 B (RedisBloom at 2,000 items), not
// met here. These are the bytes measured (2026-11-26, 4 users) + 0.5%, a
// regression ceiling: the sweeper seals the newest slice after the first
// idle hour, at the count it holds then; the user's next sessions' items
// cannot join that run (its universe fits the early count) and open a
// prefix run at b >= 19 that no seal closes. Peak 3,207 / 3,198 B here,
// 3,211 / 3,191 B in memory_bench (BM_Issue15RealTime, 300 users), against
// 2,927 / 2,900 when the same writes come within seconds
// (docs/format2-design.md, "Where it loses").
TEST(RealTimeGrowthTest, TwentyPerCallStaysWithinDeltaAndTheCeiling) {
  Growth g;
  ASSERT_NO_FATAL_FAILURE(GrowInRealTime(20, &g));
  std::printf("20/call in sessions: peak %.1f B/user, end %.1f\n",
              g.mean_peak_bytes, g.mean_end_bytes);
  EXPECT_LE(g.mean_peak_bytes, 3207 * 1.005);
}

TEST(RealTimeGrowthTest, OnePerCallStaysWithinDeltaAndTheCeiling) {
  Growth g;
  ASSERT_NO_FATAL_FAILURE(GrowInRealTime(1, &g));
  std::printf("1/call in sessions: peak %.1f B/user, end %.1f\n",
              g.mean_peak_bytes, g.mean_end_bytes);
  EXPECT_LE(g.mean_peak_bytes, 3198 * 1.005);
}

}  // namespace
}  // namespace exposure_filter
