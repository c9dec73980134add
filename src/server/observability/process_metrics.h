// ProcessMetrics: the standard process_* series of Prometheus client
// libraries (prometheus-cpp 1.0 has none), read from /proc/self at scrape
// time: process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_start_time_seconds, plus process_threads.
#ifndef EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_PROCESS_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_PROCESS_METRICS_H_

#include <prometheus/collectable.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"

namespace exposure_filter {

struct ProcessStats {
  double cpu_seconds = 0;
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  uint64_t threads = 0;
  double start_time_seconds = 0;  // Unix time
};

// Parses the content of /proc/<pid>/stat given the system's clock ticks per
// second, page size and boot time (btime of /proc/stat). nullopt if malformed.
std::optional<ProcessStats> ParseProcStat(absl::string_view stat,
                                          long ticks_per_second, long page_size,
                                          double boot_time);

class ProcessMetrics final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_PROCESS_METRICS_H_
