// When a user's calls happen in real time: the spread patterns (2,000
// items over 29 days) as a person produces them, in a few sessions a day at
// random hours, idle in between. The store's clock follows these times, so
// its sweeper (DropExpired, every sweep_interval) sees the idle hours between
// sessions and seals the open slices then (UserFilter::SealIdle), as in
// production; the compressed replays (every call at once) never let it.
// Shared by tests/store/real_time_growth_test.cc and bench/memory_bench.cc
// (header-only, no gtest), so the test guards the timing the bench reports.
#ifndef EXPOSURE_FILTER_TESTS_COMMON_SESSION_SCHEDULE_H_
#define EXPOSURE_FILTER_TESTS_COMMON_SESSION_SCHEDULE_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace exposure_filter::testing {

struct SessionSchedule {
  int days = 29;
  // Sessions a day: uniform in [min, max], each starting at a uniform
  // minute of [0, 23 h) of its day (two may fall within the idle hour).
  int min_sessions_per_day = 3;
  int max_sessions_per_day = 4;
  // Between the calls of one session (a person scrolling).
  int64_t call_gap_ms = 30'000;
};

// The times of `calls` calls starting at `start_ms`, ascending: the days'
// sessions in order, call c in session floor(c * S / calls) of the S
// sessions (as even as the pattern's 29-day spread), call_gap_ms apart
// within it. Every time is < start_ms + days (a session starts before 23 h,
// and 2,000 calls over ~100 sessions last ~10 min).
inline std::vector<int64_t> SessionCallTimes(const SessionSchedule& s,
                                             int64_t start_ms, size_t calls,
                                             std::mt19937_64& rng) {
  constexpr int64_t kDayMs = 24 * 3600 * 1000LL;
  constexpr int64_t kMinuteMs = 60 * 1000;
  std::vector<int64_t> session_starts;
  for (int d = 0; d < s.days; ++d) {
    const int n = s.min_sessions_per_day +
                  static_cast<int>(rng() % static_cast<uint64_t>(
                                               s.max_sessions_per_day -
                                               s.min_sessions_per_day + 1));
    std::vector<int64_t> day;
    for (int i = 0; i < n; ++i) {
      day.push_back(start_ms + d * kDayMs +
                    static_cast<int64_t>(rng() % (23 * 60)) * kMinuteMs);
    }
    std::sort(day.begin(), day.end());
    session_starts.insert(session_starts.end(), day.begin(), day.end());
  }
  const size_t sessions = session_starts.size();
  std::vector<int64_t> times(calls);
  size_t in_session = 0;
  for (size_t c = 0; c < calls; ++c) {
    const size_t session = c * sessions / calls;
    in_session =
        c > 0 && (c - 1) * sessions / calls == session ? in_session + 1 : 0;
    times[c] = session_starts[session] +
               static_cast<int64_t>(in_session) * s.call_gap_ms;
  }
  // Two sessions closer than a long session's calls: keep the order.
  for (size_t c = 1; c < calls; ++c)
    times[c] = std::max(times[c], times[c - 1]);
  return times;
}

}  // namespace exposure_filter::testing

#endif  // EXPOSURE_FILTER_TESTS_COMMON_SESSION_SCHEDULE_H_
