// The spread users growing in real time through the store: 2,000 items
// over 29 days in 3-4 sessions a day at random hours
// (tests/common/session_schedule.h), the store's clock following the event
// times and its sweeper (DropExpired) running every minute of it, as the
// server's default sweep_interval does, so idle hours between sessions seal
// open slices (UserFilter::SealIdle) while the user is still growing. At
// every moment of that growth (after every write and every sweep): F within
// delta, no recorded item of a live slice missed, and the bytes a reader of
// GetUserStats sees within the ceilings below. Fixed seeds, deterministic.
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
  double mean_peak_bytes = 0;   // mean over users of each one's largest bytes
  double worst_peak_bytes = 0;  // the largest bytes of any user at any moment
  double mean_end_bytes = 0;    // after the last write and 2 h of sweeps
};

// Replays kUsers users of `per_call` items per call in real time; asserts
// the invariants at every moment (the caller checks the bytes).
void GrowInRealTime(size_t per_call, Growth* g, int days = 29,
                    size_t items = 2000) {
  const int64_t start = kEndMs - days * kDayMs;
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
    testing::SessionSchedule schedule;
    schedule.days = days;
    for (int64_t t :
         testing::SessionCallTimes(schedule, start, items / per_call, rng)) {
      events.push_back({t, u});
    }
    item_rng.emplace_back(7000 + u);
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.t < b.t; });

  std::vector<std::vector<uint64_t>> recorded(kUsers);
  // Slice index of each recorded item: aged-out slices are forgotten.
  std::vector<std::vector<int64_t>> recorded_slice(kUsers);
  std::vector<double> peak(kUsers, 0);
  // The user's bytes at its last false-negative check: a sweep that left
  // them unchanged changed nothing in the filter (a seal shrinks the codes
  // by more than 24 bits, dropping a slice drops its bytes), so its items
  // are claimed as before: only changed filters are checked again.
  std::vector<uint64_t> checked_bytes(kUsers, 0);
  auto id = [](int u) { return "u" + std::to_string(u); };
  // F <= delta and every recorded item of a live slice claimed, user u now.
  auto check = [&](int u, const char* when) {
    if (recorded[u].empty()) return;
    const std::optional<UserFilterStats> stats =
        store.GetUserStats(surface, id(u));
    ASSERT_TRUE(stats.has_value()) << when;
    ASSERT_LE(stats->estimated_fp_rate, delta)
        << "user " << u << " " << when << " at " << clock.NowMs();
    peak[u] = std::max(peak[u], static_cast<double>(stats->bytes));
    if (stats->bytes == checked_bytes[u]) return;
    checked_bytes[u] = stats->bytes;
    // Through the stored filter, not the store's RemoveExposed: a read
    // would mark the user active and no idle seal would ever run.
    std::vector<uint8_t> keep(recorded[u].size(), 1);
    VisitUser(store, id(u), [&](const UserFilter& f) {
      f.RemoveExposed(surface.policy, clock.NowMs(), recorded[u], keep.data());
    });
    for (size_t i = 0; i < keep.size(); ++i) {
      ASSERT_FALSE(keep[i] && surface.policy.SliceLive(recorded_slice[u][i],
                                                       clock.NowMs()))
          << "false negative, user " << u << " item " << i << " " << when;
    }
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
    recorded_slice[e.user].resize(recorded[e.user].size(),
                                  surface.policy.SliceIndexOf(e.t));
    ASSERT_NO_FATAL_FAILURE(check(e.user, "after a write"));
  }
  ASSERT_NO_FATAL_FAILURE(sweep_until(clock.NowMs() + 2 * 3600 * 1000));
  for (int u = 0; u < kUsers; ++u) {
    g->mean_peak_bytes += peak[u] / kUsers;
    g->worst_peak_bytes = std::max(g->worst_peak_bytes, peak[u]);
    g->mean_end_bytes +=
        static_cast<double>(store.GetUserStats(surface, id(u))->bytes) / kUsers;
  }
}

// Ceilings: the target is 2,888 B (below RedisBloom at 2,000 items,
// docs/format2-design.md, "The problem"): the bytes measured (2026-11-26,
// 4 users) + 0.5%, both under the target. The sweeper seals the newest
// slice only once its span has ended (UserFilter::SealIdle), and its runs
// are sized from the user's rate, at 0.9 of what is left once the older
// slices are sealed (RunSizing::NewOpenRun). With those two rules: peak
// 2,866 / 2,871 B here, 2,868 / 2,870 B in memory_bench
// (BM_ArrivalPatternsRealTime, 300 users); before them 3,207 / 3,198 B
// here: the idle seal of a still-filling newest slice fragmented it
// (docs/format2-design.md, "Sizing policy", the idle seal; "Measured and
// rejected", the idle seal never takes the newest slice). With the seals
// at L + 1 slices and the newest run re-truncated once the older slices
// are sealed as well: peak 2,853.8 / 2,872.2 B here, 2,857 / 2,864 in
// memory_bench. Worst single user (the largest bytes any of the 4
// reached, 2026-11-26, with every rule above): 2,877 / 2,892 B (2,877 /
// 2,886 before the L + 1 seals), ceilings that + 0.5%; memory_bench's 300
// users reach 2,918 / 2,907 (user_peak_B_max).
TEST(RealTimeGrowthTest, TwentyPerCallStaysWithinDeltaAndTheCeiling) {
  Growth g;
  ASSERT_NO_FATAL_FAILURE(GrowInRealTime(20, &g));
  std::printf(
      "20/call in sessions: peak %.1f B/user (worst user %.0f), end %.1f\n",
      g.mean_peak_bytes, g.worst_peak_bytes, g.mean_end_bytes);
  EXPECT_LE(g.mean_peak_bytes, 2854 * 1.005);
  EXPECT_LE(g.worst_peak_bytes, 2877 * 1.005);
}

TEST(RealTimeGrowthTest, OnePerCallStaysWithinDeltaAndTheCeiling) {
  Growth g;
  ASSERT_NO_FATAL_FAILURE(GrowInRealTime(1, &g));
  std::printf(
      "1/call in sessions: peak %.1f B/user (worst user %.0f), end %.1f\n",
      g.mean_peak_bytes, g.worst_peak_bytes, g.mean_end_bytes);
  EXPECT_LE(g.mean_peak_bytes, 2873 * 1.005);
  EXPECT_LE(g.worst_peak_bytes, 2892 * 1.005);
}

// A steady user (not one of the target's patterns; docs/format2-design.md,
// "Known limits"): 70 items a day, 20 per call, for 90 days, aged as the
// store does (slices past the 30-day window dropped by the sweeper). Its
// bytes peak at 3,815 B (mean of the 4 users' peaks, 2026-11-26; the same
// before the L + 1 seals, 4,038 B before the newest slice waited for its
// span's end), 2,994 B two hours after its last write (2,957 before the
// L + 1 seals); the compressed replay (every call at once) measured 3,590
// B written. Regression ceiling: that peak + 0.5%; the worst of the 4
// users 3,699 B (2026-11-26; 3,860 before the L + 1 seals) + 0.5%.
TEST(RealTimeGrowthTest, ASteadyUserOver90DaysStaysWithinDeltaAndTheCeiling) {
  Growth g;
  ASSERT_NO_FATAL_FAILURE(GrowInRealTime(20, &g, 90, 6300));
  std::printf(
      "steady, 20/call, 90 days in sessions: peak %.1f B/user (worst user "
      "%.0f), end %.1f\n",
      g.mean_peak_bytes, g.worst_peak_bytes, g.mean_end_bytes);
  EXPECT_LE(g.mean_peak_bytes, 3682 * 1.005);
  EXPECT_LE(g.worst_peak_bytes, 3699 * 1.005);
}

}  // namespace
}  // namespace exposure_filter
