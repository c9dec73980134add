// The arrival patterns a feed produces (docs/performance.md, "Memory per
// user"), replayed into a UserFilter, with the
// checks every format-2 test needs: zero false negatives for what is inside
// the window, and the union bound F <= delta after every write.
#ifndef EXPOSURE_FILTER_TESTS_FILTER_ARRIVAL_PATTERNS_H_
#define EXPOSURE_FILTER_TESTS_FILTER_ARRIVAL_PATTERNS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "exposure_filter/item_hash.h"
#include "src/filter/user_filter.h"

namespace exposure_filter::testing {

inline constexpr int64_t kDay = 24 * 3600 * 1000LL;
// 2026-11-22T03:00Z: inside a 5-day slice, like the benches' "now".
inline constexpr int64_t kNow = 1795392000000LL + 3 * 3600 * 1000LL;

inline FilterPolicy DefaultPolicy() { return *FilterPolicy::Create({}); }

// Recorded ids have the top bit clear, fresh ids have it set: disjoint.
inline std::vector<uint64_t> Hashes(std::mt19937_64& rng, size_t n,
                                    bool fresh) {
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) {
    uint64_t id = rng() >> 1;
    if (fresh) id |= uint64_t{1} << 63;
    x = HashItemId(id);
  }
  return h;
}

// One write: items at one event time.
struct Write {
  std::vector<uint64_t> hashes;
  int64_t event_ms;
};

// The patterns (per user). `rng` draws the items (and, for the
// backfill, the event times).
enum class Pattern {
  kOneCall2000,      // 2,000 items in one call
  kToday20PerCall,   // 2,000 items, 20 per call, all now
  kSpread20PerCall,  // 2,000, 20 per call, over 29 days in order
  kSpread1PerCall,   // 2,000, 1 per call, over 29 days in order
  kLight20,          // 20 items in one call
  kBackfill5000,     // 5,000, 20 per call, random times over 20 days
};

inline const char* PatternName(Pattern p) {
  switch (p) {
    case Pattern::kOneCall2000:
      return "2000 in one call";
    case Pattern::kToday20PerCall:
      return "2000, 20/call, today";
    case Pattern::kSpread20PerCall:
      return "2000, 20/call, 29 days in order";
    case Pattern::kSpread1PerCall:
      return "2000, 1/call, 29 days";
    case Pattern::kLight20:
      return "20 items";
    case Pattern::kBackfill5000:
      return "5000, 20/call, random over 20 days";
  }
  return "?";
}

inline std::vector<Write> Writes(Pattern p, std::mt19937_64& rng) {
  std::vector<Write> w;
  auto spread = [&](size_t total, size_t per_call) {
    const size_t calls = total / per_call;
    for (size_t c = 0; c < calls; ++c) {
      w.push_back(
          {Hashes(rng, per_call, false),
           kNow - 29 * kDay + static_cast<int64_t>(29 * kDay * c / calls)});
    }
  };
  switch (p) {
    case Pattern::kOneCall2000:
      w.push_back({Hashes(rng, 2000, false), kNow});
      break;
    case Pattern::kToday20PerCall:
      for (int c = 0; c < 100; ++c) w.push_back({Hashes(rng, 20, false), kNow});
      break;
    case Pattern::kSpread20PerCall:
      spread(2000, 20);
      break;
    case Pattern::kSpread1PerCall:
      spread(2000, 1);
      break;
    case Pattern::kLight20:
      w.push_back({Hashes(rng, 20, false), kNow});
      break;
    case Pattern::kBackfill5000:
      // 20 items per call, each call's items at one random time (a
      // backfill replays events of the last 20 days in no order).
      for (int c = 0; c < 250; ++c) {
        const int64_t t = kNow - static_cast<int64_t>(
                                     rng() % static_cast<uint64_t>(20 * kDay));
        w.push_back({Hashes(rng, 20, false), t});
      }
      break;
  }
  return w;
}

inline constexpr Pattern kAllPatterns[] = {
    Pattern::kOneCall2000,     Pattern::kToday20PerCall,
    Pattern::kSpread20PerCall, Pattern::kSpread1PerCall,
    Pattern::kLight20,         Pattern::kBackfill5000};

// Every hash in `recorded` is claimed at `now` (RemoveExposed and MayContain
// for a sample).
inline void ExpectNoFalseNegatives(const UserFilter& f, const FilterPolicy& p,
                                   int64_t now,
                                   const std::vector<uint64_t>& recorded,
                                   const std::string& where) {
  std::vector<uint8_t> keep(recorded.size(), 1);
  f.RemoveExposed(p, now, recorded, keep.data());
  for (size_t i = 0; i < recorded.size(); ++i) {
    ASSERT_EQ(keep[i], 0) << where << ": false negative at item " << i;
  }
  for (size_t i = 0; i < recorded.size(); i += 97) {
    ASSERT_TRUE(f.MayContain(p, now, recorded[i])) << where << " item " << i;
  }
}

// How many of `fresh` (never recorded) the filter claims.
inline size_t ClaimedFresh(const UserFilter& f, const FilterPolicy& p,
                           int64_t now, const std::vector<uint64_t>& fresh) {
  std::vector<uint8_t> keep(fresh.size(), 1);
  f.RemoveExposed(p, now, fresh, keep.data());
  return static_cast<size_t>(std::count(keep.begin(), keep.end(), 0));
}

}  // namespace exposure_filter::testing

#endif  // EXPOSURE_FILTER_TESTS_FILTER_ARRIVAL_PATTERNS_H_
