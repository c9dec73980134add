// Internal to UserFilter's implementation, which is split by concept over
// user_filter_*.cc (user_filter.h has the class and its layout): what more
// than one of those files needs. Not part of the filter's API; include it
// only from user_filter_*.cc.
#ifndef EXPOSURE_FILTER_SRC_FILTER_USER_FILTER_INTERNAL_H_
#define EXPOSURE_FILTER_SRC_FILTER_USER_FILTER_INTERNAL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "src/filter/bloom_slices.h"
#include "src/filter/user_filter.h"

namespace exposure_filter {

// Legacy format-1 slices: read-only, their expected FP rate charged to F.
struct UserFilter::Legacy {
  BloomSlices slices;
  double fp = 0;  // LegacyFpRate: what it adds to F
};

namespace user_filter_internal {

// The legacy slices' FP rate: 1 - P(a fresh item passes all of them).
double LegacyFpRate(const BloomSlices& b);

// Whether no slice but the newest holds an open run (`Plan`: a vector of
// UserFilter::SlicePlan, a private type deduced here).
template <typename Plan>
bool OlderSlicesSealed(const Plan& plan) {
  for (size_t i = 0; i + 1 < plan.size(); ++i) {
    for (const auto& r : plan[i].runs) {
      if (r.meta.open) return false;
    }
  }
  return true;
}
// The earliest event of any slice that holds runs, `event_ms` if later.
template <typename Plan>
int64_t FirstLiveEventMs(const Plan& plan, int64_t event_ms) {
  int64_t first_ms = event_ms;
  for (const auto& s : plan) {
    if (!s.runs.empty()) first_ms = std::min(first_ms, s.meta.min_event_ms);
  }
  return first_ms;
}

}  // namespace user_filter_internal
}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_USER_FILTER_INTERNAL_H_
