// LogRateLimiter: lets a log line through at most once per interval and
// counts what it held back, so a condition that repeats per request (an
// internal error, an eviction storm) costs one line per interval, with the
// number of suppressed repeats, instead of flooding the log.
#ifndef EXPOSURE_FILTER_SRC_BASE_LOG_RATE_LIMITER_H_
#define EXPOSURE_FILTER_SRC_BASE_LOG_RATE_LIMITER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/base/monotonic_time.h"

namespace exposure_filter {

class LogRateLimiter {
 public:
  explicit LogRateLimiter(absl::Duration interval) : interval_(interval) {}

  // True if the caller may log now; then *suppressed is the number of calls
  // refused since the last true. `now` is monotonic (MonotonicTime()), so a
  // wall-clock step back cannot silence the line for as long as the step.
  bool Allow(uint64_t* suppressed, absl::Time now = MonotonicTime()) {
    absl::MutexLock lock(&mu_);
    if (now < next_) {
      ++suppressed_;
      return false;
    }
    next_ = now + interval_;
    *suppressed = suppressed_;
    suppressed_ = 0;
    return true;
  }

 private:
  const absl::Duration interval_;
  absl::Mutex mu_;
  absl::Time next_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_BASE_LOG_RATE_LIMITER_H_
