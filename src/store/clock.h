// Clock: where the store reads "now". Injectable so tests drive aging by
// moving a manual clock instead of sleeping.
#ifndef EXPOSURE_FILTER_SRC_STORE_CLOCK_H_
#define EXPOSURE_FILTER_SRC_STORE_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace exposure_filter {

class Clock {
 public:
  virtual ~Clock() = default;
  // Unix time in milliseconds.
  virtual int64_t NowMs() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override { return absl::ToUnixMillis(absl::Now()); }
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t now_ms) : now_ms_(now_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  void Set(int64_t now_ms) { now_ms_.store(now_ms); }
  void Advance(absl::Duration d) {
    now_ms_.fetch_add(absl::ToInt64Milliseconds(d));
  }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_CLOCK_H_
