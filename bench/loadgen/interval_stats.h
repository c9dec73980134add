// IntervalStats: what all workers completed since the last Take(), for the
// per-interval lines of long runs (--report_interval, bench/soak.sh): rate,
// latency percentiles and errors by code per minute, so a slow leak or a
// burst of errors shows when it happened, not only in the run's totals.
#ifndef EXPOSURE_FILTER_BENCH_LOADGEN_INTERVAL_STATS_H_
#define EXPOSURE_FILTER_BENCH_LOADGEN_INTERVAL_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace exposure_filter::bench {

class IntervalStats {
 public:
  struct Snapshot {
    uint64_t requests = 0;                   // completed OK
    std::vector<int64_t> latencies_ns;       // of the OK ones, unsorted
    std::map<std::string, uint64_t> errors;  // by status code name
  };

  void AddOk(int64_t latency_ns) {
    absl::MutexLock lock(&mu_);
    ++current_.requests;
    current_.latencies_ns.push_back(latency_ns);
  }
  void AddError(const std::string& code) {
    absl::MutexLock lock(&mu_);
    ++current_.errors[code];
  }
  Snapshot Take() {
    absl::MutexLock lock(&mu_);
    Snapshot out = std::move(current_);
    current_ = Snapshot();
    return out;
  }

 private:
  absl::Mutex mu_;
  Snapshot current_ ABSL_GUARDED_BY(mu_);
};

// One interval as a JSON object (one line) or a human line. `index` counts
// from 1; `elapsed_s` is the end of the interval since the measured phase
// began; `seconds` its length; `server_rss_bytes` < 0 when unknown.
std::string IntervalJson(int index, double elapsed_s, double seconds,
                         IntervalStats::Snapshot s, int64_t server_rss_bytes);
std::string IntervalLine(int index, double elapsed_s, double seconds,
                         IntervalStats::Snapshot s, int64_t server_rss_bytes);

}  // namespace exposure_filter::bench

#endif  // EXPOSURE_FILTER_BENCH_LOADGEN_INTERVAL_STATS_H_
