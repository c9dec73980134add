// All-in memory per user measured through the store: what
// ShardedFilterStore accounts (filter allocation + map slot, the figure the
// memory ceiling and GetServerStats use), the same plus the hash tables'
// empty slots, and what glibc's heap really grew by (mallinfo2: includes
// malloc's per-chunk headers and alignment padding, which the accounting
// leaves out), with the measured false-positive rate of the stored filters.
//   GLIBC_TUNABLES=glibc.malloc.tcache_count=0 build/bench/memory_bench
// (without the tunable, chunks parked in glibc's per-thread cache count as
// in use: 2,000 items at 20 per call measured 3,217 heap B/user with the
// cache, 2,556 without, when 300 users' filters are rebuilt in turns). Not a
// timing: every benchmark runs its loop once. Figures: docs/performance.md,
// "Memory per user".
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "exposure_filter/item_hash.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"
#include "tests/common/session_schedule.h"

namespace exposure_filter {
namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
// 2026-11-22T03:00Z: inside a 5-day slice, like the other benches' "now".
constexpr int64_t kNow = 1795392000000LL + 3 * 3600 * 1000LL;

std::vector<uint64_t> RandomHashes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) x = HashItemId(rng());
  return h;
}
// The same hashes into `h`, reusing its capacity (no heap traffic inside a
// heap measurement).
void RandomHashesInto(size_t n, uint64_t seed, std::vector<uint64_t>* h) {
  std::mt19937_64 rng(seed);
  h->resize(n);
  for (uint64_t& x : *h) x = HashItemId(rng());
}

// 12-byte user ids, a typical size ("u" + 11 digits).
std::string UserId(int u) { return absl::StrFormat("u%011d", u); }

struct Population {
  ManualClock clock;
  std::unique_ptr<SurfaceRegistry> registry;
  std::unique_ptr<ShardedFilterStore> store;
  const Surface* surface = nullptr;

  explicit Population(int64_t now_ms = kNow) : clock(now_ms) {
    registry = *SurfaceRegistry::Create(FilterPolicyOptions{}, {}, 8);
    store = std::make_unique<ShardedFilterStore>(64, &clock, registry.get());
    surface = *registry->GetOrCreate("homefeed");
  }
  // `items` exposures spread evenly over `slices` 5-day slices of the
  // 30-day window (oldest first, so each new slice seals the one before),
  // recorded `batch` items per call.
  // With `burst` > 0, every other slice gets (1 + burst) times the volume
  // of the others (a user whose rate varies: the slice after a quiet one
  // overflows its prediction and grows a segment).
  void AddUser(int u, const std::vector<uint64_t>& items, int slices,
               size_t batch, double burst = 0) {
    const std::string id = UserId(u);
    std::vector<size_t> bounds(slices + 1, 0);
    double weights = 0;
    for (int s = 0; s < slices; ++s) weights += s % 2 == 1 ? 1 + burst : 1;
    double acc = 0;
    for (int s = 0; s < slices; ++s) {
      acc += s % 2 == 1 ? 1 + burst : 1;
      bounds[s + 1] = static_cast<size_t>(items.size() * acc / weights);
    }
    bounds[slices] = items.size();
    for (int s = slices - 1; s >= 0; --s) {
      const size_t begin = bounds[slices - 1 - s];
      const size_t end = bounds[slices - s];
      for (size_t i = begin; i < end; i += batch) {
        const UserExposures ue{id,
                               {items.data() + i, std::min(batch, end - i)},
                               kNow - s * 5 * kDay};
        store->Record(*surface, {&ue, 1});
      }
    }
  }
  // Fraction of `fresh` the user's stored filter drops.
  double FpRate(int u, const std::vector<uint64_t>& fresh) const {
    std::vector<uint8_t> keep(fresh.size(), 1);
    store->RemoveExposed(*surface, UserId(u), fresh, keep.data());
    return static_cast<double>(std::count(keep.begin(), keep.end(), 0)) /
           fresh.size();
  }
};

void Report(benchmark::State& state, const Population& p, size_t heap_before,
            int users, double items) {
  const StoreUsage usage = p.store->Usage(p.registry->All().size());
  const size_t heap = mallinfo2().uordblks - heap_before;
  state.counters["users"] = users;
  state.counters["accounted_B_per_user"] =
      static_cast<double>(usage.bytes) / users;
  state.counters["with_table_slack_B_per_user"] =
      static_cast<double>(p.store->total_bytes()) / users;
  state.counters["malloc_heap_B_per_user"] = static_cast<double>(heap) / users;
  state.counters["bits_per_item"] = 8.0 * usage.bytes / items;
}

// range(0) items per user over range(2) slices, range(1) per call.
void BM_StoreBytesPerUser(benchmark::State& state) {
  const size_t items = static_cast<size_t>(state.range(0));
  const size_t batch = static_cast<size_t>(state.range(1));
  const int slices = static_cast<int>(state.range(2));
  // ~10-20 MB of filters per configuration.
  const int users = static_cast<int>(
      std::clamp<size_t>(20'000'000 / (items * 2 + 200), 200, 100'000));
  for (auto _ : state) {
    const size_t heap_before = mallinfo2().uordblks;
    Population p;
    for (int u = 0; u < users; ++u) {
      p.AddUser(u, RandomHashes(items, 1000 + u), slices, batch);
    }
    const std::vector<uint64_t> fresh = RandomHashes(100'000, 7);
    double worst_fp = 0;
    for (int u = 0; u < std::min(users, 20); ++u) {
      worst_fp = std::max(worst_fp, p.FpRate(u, fresh));
    }
    Report(state, p, heap_before, users, static_cast<double>(users) * items);
    state.counters["worst_fp_20_users"] = worst_fp;
  }
}
// Each arrival pattern (one batch per slice, 20 per call, one per call)
// over 20 to 20,000 items, so bench/plot_figures.py can draw bytes per user
// against items per pattern (docs/img/memory_per_user.png).
BENCHMARK(BM_StoreBytesPerUser)
    ->Args({20, 20, 1})  // the light 20-item user: one slice
    ->Args({20, 1, 1})
    ->Args({20, 1000000, 7})  // one batch per slice
    ->Args({200, 1000000, 7})
    ->Args({2000, 1000000, 7})
    ->Args({20000, 1000000, 7})
    ->Args({20, 20, 7})
    ->Args({200, 20, 7})
    ->Args({2000, 20, 7})
    ->Args({20000, 20, 7})
    ->Args({20, 1, 7})  // one per call
    ->Args({200, 1, 7})
    ->Args({2000, 1, 7})
    ->Args({20000, 1, 7})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// The arrival patterns format 2 was sized for (docs/performance.md), through
// the store, one row each: range(0) =
// 0: 2,000 items in one call (300 users); 1: 2,000 at 20 per call, all now;
// 2: 2,000 at 20 per call over 29 days in order; 3: 2,000 at 1 per call over
// 29 days; 4: 20 items; 5: 5,000 at 20 per call, each call at a random time
// of the last 20 days (a backfill); 6: a Zipf population (exponent 1) of
// 2,000 users holding 1 to 50,000 items, 20 per call, spread evenly over
// min(7, items) slices of the window, oldest first (AddUser's order).
//
// The users write in turns, call c of every user before call c + 1 of any
// (each user's own calls in its order), so the population passes through
// the same moments of its growth together: day10_B_per_user and
// day20_B_per_user are the accounted bytes before the first call past day
// 10 / 20 of the 29 (patterns 2 and 3; a reader of GetUserStats sees these
// while the users still write), written_B_per_user right after the last
// call. Then the users go idle: the clock advances 2 h and one sweep
// (ShardedFilterStore::DropExpired) seals idle slices
// (UserFilter::SealIdle); accounted and heap bytes, the mean union bound F
// (GetUserStats.estimated_fp_rate), the FP measured with 20,000
// never-recorded candidates per user (pooled; every 10th user for Zipf)
// and the false negatives among every recorded item (must be 0) are
// measured after it.
struct Call {
  uint64_t seed;
  size_t items;
  int64_t event_ms;
};

std::vector<Call> PatternCalls(int pattern, int u, size_t* zipf_items) {
  std::vector<Call> calls;
  std::mt19937_64 rng(1000 + u);
  auto record = [&](size_t n, int64_t t) { calls.push_back({rng(), n, t}); };
  auto spread = [&](size_t total, size_t per_call) {
    const size_t n = total / per_call;
    for (size_t c = 0; c < n; ++c) {
      record(per_call,
             kNow - 29 * kDay + static_cast<int64_t>(29 * kDay * c / n));
    }
  };
  switch (pattern) {
    case 0:
      record(2000, kNow);
      break;
    case 1:
      for (int c = 0; c < 100; ++c) record(20, kNow);
      break;
    case 2:
      spread(2000, 20);
      break;
    case 3:
      spread(2000, 1);
      break;
    case 4:
      record(20, kNow);
      break;
    case 5:
      for (int c = 0; c < 250; ++c) {
        const int64_t t = kNow - static_cast<int64_t>(
                                     rng() % static_cast<uint64_t>(20 * kDay));
        record(20, t);
      }
      break;
    case 6: {
      const size_t n = *zipf_items;
      const int slices = static_cast<int>(std::min<size_t>(7, n));
      // Slice s (oldest first) holds items [n s / slices, n (s+1) / slices).
      for (int s = 0; s < slices; ++s) {
        const size_t begin = n * s / slices, end = n * (s + 1) / slices;
        for (size_t i = begin; i < end; i += 20) {
          record(std::min<size_t>(20, end - i),
                 kNow - (slices - 1 - s) * 5 * kDay);
        }
      }
      break;
    }
  }
  return calls;
}

// After the users went idle: the mean union bound F
// (GetUserStats.estimated_fp_rate), the FP measured with 20,000
// never-recorded candidates per user (pooled over every `fp_every`-th user)
// and the false negatives among every recorded item (must be 0).
void MeasureStored(benchmark::State& state, const Population& p,
                   const std::vector<std::vector<Call>>& calls, int fp_every) {
  const int users = static_cast<int>(calls.size());
  const std::vector<uint64_t> fresh = RandomHashes(20'000, 7);
  double claimed = 0, probed = 0, bound = 0, false_negatives = 0;
  for (int u = 0; u < users; ++u) {
    if (u % fp_every == 0) {
      claimed += p.FpRate(u, fresh) * fresh.size();
      probed += fresh.size();
    }
    bound += p.store->GetUserStats(*p.surface, UserId(u))->estimated_fp_rate;
    std::vector<uint64_t> recorded;
    for (const Call& call : calls[u]) {
      const std::vector<uint64_t> r = RandomHashes(call.items, call.seed);
      recorded.insert(recorded.end(), r.begin(), r.end());
    }
    std::vector<uint8_t> keep(recorded.size(), 1);
    p.store->RemoveExposed(*p.surface, UserId(u), recorded, keep.data());
    false_negatives += std::count(keep.begin(), keep.end(), 1);
  }
  state.counters["fp_measured"] = claimed / probed;
  state.counters["fp_bound_mean"] = bound / users;
  state.counters["false_negatives"] = false_negatives;
}

void BM_ArrivalPatterns(benchmark::State& state) {
  const int pattern = static_cast<int>(state.range(0));
  static const char* kNames[] = {"2000 in one call",
                                 "2000 20/call today",
                                 "2000 20/call 29 days",
                                 "2000 1/call 29 days",
                                 "20 items",
                                 "5000 20/call random 20 days",
                                 "Zipf 1..50000 20/call"};
  const int users = pattern == 6 ? 2000 : 300;
  for (auto _ : state) {
    // Every call's (seed, items, time), to replay and to regenerate the
    // recorded items for the false-negative check: allocated before the
    // heap is measured.
    std::vector<std::vector<Call>> calls(users);
    std::mt19937_64 zipf_rng(21);
    std::uniform_real_distribution<double> u01(0, 1);
    size_t most_calls = 0;
    for (int u = 0; u < users; ++u) {
      // Inverse CDF of the continuous 1/x law on [1, 50,000].
      size_t n = static_cast<size_t>(std::pow(50000.0, u01(zipf_rng)));
      calls[u] = PatternCalls(pattern, u, &n);
      most_calls = std::max(most_calls, calls[u].size());
    }
    std::vector<uint64_t> h;
    h.reserve(50000);
    const size_t heap_before = mallinfo2().uordblks;
    Population p;
    double items = 0;
    const bool timed = pattern == 2 || pattern == 3;
    double at_day[2] = {0, 0};
    int next_mark = 0;
    for (size_t c = 0; c < most_calls; ++c) {
      if (timed && next_mark < 2 &&
          calls[0][c].event_ms >=
              kNow - 29 * kDay + (next_mark + 1) * 10 * kDay) {
        at_day[next_mark++] =
            static_cast<double>(
                p.store->Usage(p.registry->All().size()).bytes) /
            users;
      }
      for (int u = 0; u < users; ++u) {
        if (c >= calls[u].size()) continue;
        const Call& call = calls[u][c];
        RandomHashesInto(call.items, call.seed, &h);
        const std::string id = UserId(u);
        const UserExposures ue{id, h, call.event_ms};
        p.store->Record(*p.surface, {&ue, 1});
        items += static_cast<double>(call.items);
      }
    }
    const StoreUsage written = p.store->Usage(p.registry->All().size());
    p.clock.Advance(absl::Hours(2));
    p.store->DropExpired();
    Report(state, p, heap_before, users, items);
    state.counters["written_B_per_user"] =
        static_cast<double>(written.bytes) / users;
    if (timed) {
      state.counters["day10_B_per_user"] = at_day[0];
      state.counters["day20_B_per_user"] = at_day[1];
    }
    MeasureStored(state, p, calls, pattern == 6 ? 10 : 1);
    state.counters["avg_items_per_user"] = items / users;
    state.SetLabel(kNames[pattern]);
  }
}
BENCHMARK(BM_ArrivalPatterns)
    ->DenseRange(0, 6)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// The spread patterns of BM_ArrivalPatterns (rows 2 and 3: 2,000 items over
// 29 days, range(0) = 0: 20 per call, 1: 1 per call; 300 users) with the
// store's clock following the event times: each user's calls fall in 3-4
// sessions a day at random hours, 30 s apart within a session
// (tests/common/session_schedule.h), and the sweeper runs every minute of
// that clock (the server's default sweep_interval), so it seals a user's
// open slices once the user has been idle an hour between sessions
// (UserFilter::SealIdle), as in production. The compressed rows above are
// the backfill-like worst case: 29 days of writes within seconds of wall
// time, no idle hour until the end.
// peak_B_per_user: the largest mean accounted bytes over the population at
// any moment (after every write and every sweep); user_peak_B_mean / _max:
// each user's largest GetUserStats.bytes after any of its writes (a sweep
// only shrinks a user), mean and worst over the users; written_B_per_user
// right after the last write; accounted after 2 more hours of sweeps.
void BM_ArrivalPatternsRealTime(benchmark::State& state) {
  const size_t per_call = state.range(0) == 0 ? 20 : 1;
  constexpr int kUsers = 300;
  constexpr int64_t kSweepMs = 60'000;
  const int64_t start = kNow - 29 * kDay;
  for (auto _ : state) {
    struct Event {
      int64_t t;
      int user;
      size_t call;
    };
    std::vector<std::vector<Call>> calls(kUsers);
    std::vector<Event> events;
    for (int u = 0; u < kUsers; ++u) {
      std::mt19937_64 rng(1000 + u);
      const std::vector<int64_t> times = testing::SessionCallTimes(
          testing::SessionSchedule{}, start, 2000 / per_call, rng);
      for (size_t c = 0; c < times.size(); ++c) {
        calls[u].push_back({rng(), per_call, times[c]});
        events.push_back({times[c], u, c});
      }
    }
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
      return a.t != b.t ? a.t < b.t : a.user < b.user;
    });
    std::vector<uint64_t> h;
    h.reserve(per_call);
    std::vector<double> user_peak(kUsers, 0);
    const size_t heap_before = mallinfo2().uordblks;
    Population p(start);
    double peak = 0;
    auto mean_bytes = [&] {
      return static_cast<double>(
                 p.store->Usage(p.registry->All().size()).bytes) /
             kUsers;
    };
    int64_t next_sweep = start + kSweepMs;
    // Every sweep due up to `t`, at its time.
    auto sweep_until = [&](int64_t t) {
      for (; next_sweep <= t; next_sweep += kSweepMs) {
        p.clock.Advance(absl::Milliseconds(next_sweep - p.clock.NowMs()));
        p.store->DropExpired();
        peak = std::max(peak, mean_bytes());
      }
    };
    double items = 0;
    for (const Event& e : events) {
      sweep_until(e.t);
      p.clock.Advance(absl::Milliseconds(e.t - p.clock.NowMs()));
      const Call& call = calls[e.user][e.call];
      RandomHashesInto(call.items, call.seed, &h);
      const std::string id = UserId(e.user);
      const UserExposures ue{id, h, call.event_ms};
      p.store->Record(*p.surface, {&ue, 1});
      items += static_cast<double>(call.items);
      user_peak[e.user] = std::max(
          user_peak[e.user],
          static_cast<double>(p.store->GetUserStats(*p.surface, id)->bytes));
      peak = std::max(peak, mean_bytes());
    }
    const double written = mean_bytes();
    sweep_until(p.clock.NowMs() + 2 * 3600 * 1000);
    Report(state, p, heap_before, kUsers, items);
    state.counters["written_B_per_user"] = written;
    state.counters["peak_B_per_user"] = peak;
    double sum = 0, worst = 0;
    for (double b : user_peak) {
      sum += b;
      worst = std::max(worst, b);
    }
    state.counters["user_peak_B_mean"] = sum / kUsers;
    state.counters["user_peak_B_max"] = worst;
    MeasureStored(state, p, calls, 1);
    state.counters["avg_items_per_user"] = items / kUsers;
    state.SetLabel(per_call == 20 ? "2000 20/call 29 days, sessions"
                                  : "2000 1/call 29 days, sessions");
  }
}
BENCHMARK(BM_ArrivalPatternsRealTime)
    ->DenseRange(0, 1)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace exposure_filter

BENCHMARK_MAIN();
