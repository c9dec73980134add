// Clock: where the store reads "now". Injectable so tests drive aging by
// moving a manual clock instead of sleeping.
//
// Two readings (docs/reliability.md, "Time and clocks"):
//   NowMs()       the wall clock, Unix ms. It places exposures in slices and
//                 ages them out, because event times come from clients in
//                 the same unit. It may step backwards or forwards (NTP,
//                 an operator, a VM restore).
//   MonotonicMs() never goes backwards and ignores wall-clock steps; for
//                 intervals only (uptime, least-recently-active order of
//                 the memory ceiling). Its origin is arbitrary.
#ifndef EXPOSURE_FILTER_SRC_STORE_CLOCK_H_
#define EXPOSURE_FILTER_SRC_STORE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/base/monotonic_time.h"

namespace exposure_filter {

class Clock {
 public:
  virtual ~Clock() = default;
  // Unix time in milliseconds.
  virtual int64_t NowMs() const = 0;
  // Milliseconds since an arbitrary origin; never decreases.
  virtual int64_t MonotonicMs() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override { return absl::ToUnixMillis(absl::Now()); }
  int64_t MonotonicMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// Tests: Set() steps the wall clock (either way) and leaves the monotonic
// clock alone, as an NTP step or an operator would; Advance() is time
// passing, and moves both.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t now_ms) : now_ms_(now_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  int64_t MonotonicMs() const override { return monotonic_ms_.load(); }
  void Set(int64_t now_ms) { now_ms_.store(now_ms); }
  // d >= 0: time does not run backwards; Set() models wall-clock steps.
  void Advance(absl::Duration d) {
    const int64_t ms = absl::ToInt64Milliseconds(d);
    now_ms_.fetch_add(ms);
    if (ms > 0) monotonic_ms_.fetch_add(ms);
  }

 private:
  std::atomic<int64_t> now_ms_;
  // Starts far from 0 so "never touched" (0) is older than any reading.
  std::atomic<int64_t> monotonic_ms_{1'000'000};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_CLOCK_H_
