// Pacer: holds the load generator to a total request rate (--rate) shared by
// all its workers, so a long run (bench/soak.sh) can drive the server at a
// fixed fraction of its measured capacity instead of flat out. Each caller
// takes the next free slot, one 1/rate apart, and sleeps until it. Slots
// missed while the server was slow are not made up later: a pacer that fell
// behind restarts from "now" rather than bursting to catch up.
#ifndef EXPOSURE_FILTER_BENCH_LOADGEN_PACER_H_
#define EXPOSURE_FILTER_BENCH_LOADGEN_PACER_H_

#include <chrono>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace exposure_filter::bench {

class Pacer {
 public:
  using Clock = std::chrono::steady_clock;

  // per_second <= 0: no pacing, Wait() returns at once.
  explicit Pacer(double per_second)
      : interval_(per_second > 0
                      ? std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(1.0 / per_second))
                      : Clock::duration::zero()) {}

  void Wait() {
    if (interval_ == Clock::duration::zero()) return;
    Clock::time_point slot;
    {
      absl::MutexLock lock(&mu_);
      const Clock::time_point now = Clock::now();
      if (next_ < now) next_ = now;
      slot = next_;
      next_ += interval_;
    }
    std::this_thread::sleep_until(slot);
  }

 private:
  const Clock::duration interval_;
  absl::Mutex mu_;
  Clock::time_point next_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exposure_filter::bench

#endif  // EXPOSURE_FILTER_BENCH_LOADGEN_PACER_H_
