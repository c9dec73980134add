// SyncTimer: when the `interval` fsync policy's background thread syncs the
// write-ahead log. The thread loops `while (timer->Wait(interval)) Sync()`.
// A seam so tests can fire the interval by hand and check that a sync
// follows each one without sleeping through real intervals
// (tests/persist/wal_durability_test.cc); production uses RealSyncTimer.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_SYNC_TIMER_H_
#define EXPOSURE_FILTER_SRC_PERSIST_SYNC_TIMER_H_

#include <chrono>
#include <condition_variable>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "src/store/annotated_mutex.h"

namespace exposure_filter {

class SyncTimer {
 public:
  virtual ~SyncTimer() = default;
  // Blocks until `period` has passed (true: sync now) or Stop() was called
  // (false, at once, also for every later call).
  virtual bool Wait(absl::Duration period) = 0;
  virtual void Stop() = 0;
};

// Waits on a condition variable with a timeout: steady clock, so wall-clock
// steps neither hurry nor delay syncs.
class RealSyncTimer final : public SyncTimer {
 public:
  bool Wait(absl::Duration period) override {
    MutexLock lock(&mu_);
    return !mu_.AwaitWithTimeout(
        cv_, absl::ToChronoMilliseconds(period),
        [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopped_; });
  }
  void Stop() override {
    {
      MutexLock lock(&mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_SYNC_TIMER_H_
