// DurabilityMetrics: the write-ahead log's and snapshots' health as
// Prometheus series, read from StoreDurability at scrape time (issue 8:
// disk faults). A server without --data_dir exports none of them.
//
//   exposure_filter_wal_writable                 1, or 0 while writes are
//                                                refused (disk full,
//                                                read-only, fsync error)
//   exposure_filter_wal_failures_total           times the log failed
//   exposure_filter_wal_recoveries_total         times it recovered
//   exposure_filter_disk_errors_total{op,error}  failed disk operations
//   exposure_filter_snapshots_total, exposure_filter_snapshot_failures_total
#ifndef EXPOSURE_FILTER_SRC_SERVER_DURABILITY_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_DURABILITY_METRICS_H_

#include <prometheus/collectable.h>

#include <atomic>
#include <vector>

#include "src/persist/store_durability.h"

namespace exposure_filter {

class DurabilityMetrics final : public prometheus::Collectable {
 public:
  // Called once recovery is done (the admin port scrapes from before);
  // `durability` must then outlive every Collect().
  void Attach(const StoreDurability* durability) {
    durability_.store(durability, std::memory_order_release);
  }

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::atomic<const StoreDurability*> durability_{nullptr};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_DURABILITY_METRICS_H_
