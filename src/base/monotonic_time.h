// MonotonicTime: absl::Time read from std::chrono::steady_clock.
#ifndef EXPOSURE_FILTER_SRC_BASE_MONOTONIC_TIME_H_
#define EXPOSURE_FILTER_SRC_BASE_MONOTONIC_TIME_H_

#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace exposure_filter {

// absl::Time on the monotonic clock (std::chrono::steady_clock), for
// deadlines and intervals of background work (sweeps, snapshots, log rate
// limits) that must not stall or fire early when the wall clock steps.
// Only differences between two readings mean anything.
inline absl::Time MonotonicTime() {
  return absl::UnixEpoch() +
         absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_BASE_MONOTONIC_TIME_H_
