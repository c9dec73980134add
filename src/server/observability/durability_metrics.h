// DurabilityMetrics: the write-ahead log's and snapshots' health as
// Prometheus series, read from StoreDurability at scrape time, so disk
// faults show. A server without --data_dir exports none of them.
//
//   exposure_filter_wal_writable                 1, or 0 while writes are
//                                                refused (disk full,
//                                                read-only, fsync error)
//   exposure_filter_wal_failures_total           times the log failed
//   exposure_filter_wal_recoveries_total         times it recovered
//   exposure_filter_disk_errors_total{op,error}  failed disk operations
//   exposure_filter_snapshots_total, exposure_filter_snapshot_failures_total
//   exposure_filter_wal_{records,bytes,writes,syncs}_total
//                                                appends, group commits
//                                                (write(2) batches), fdatasyncs
//   exposure_filter_wal_fsync_seconds            fdatasync latency histogram
//   exposure_filter_last_snapshot_timestamp_seconds  (absent before the
//                                                first), ..._bytes, ..._users
//   exposure_filter_recovery_*                   what startup recovery did
//                                                (constant until restart)
#ifndef EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_DURABILITY_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_DURABILITY_METRICS_H_

#include <prometheus/collectable.h>

#include <atomic>
#include <vector>

#include "src/persist/store_durability.h"

namespace exposure_filter {

class DurabilityMetrics final : public prometheus::Collectable {
 public:
  // Called once recovery is done (the admin port scrapes from before);
  // `durability` must then outlive every Collect(). `recovery` is copied.
  void Attach(const StoreDurability* durability,
              const RecoveryReport& recovery) {
    recovery_ = recovery;  // published by the release store below
    durability_.store(durability, std::memory_order_release);
  }

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  // Written once before durability_ is published, read-only after.
  RecoveryReport recovery_;
  std::atomic<const StoreDurability*> durability_{nullptr};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_DURABILITY_METRICS_H_
