#include "src/server/durability_metrics.h"

#include <string>

#include "src/persist/disk_errors.h"
#include "src/server/metric_families.h"

namespace exposure_filter {

using prometheus::MetricFamily;
using prometheus::MetricType;

std::vector<MetricFamily> DurabilityMetrics::Collect() const {
  std::vector<MetricFamily> out;
  const StoreDurability* durability =
      durability_.load(std::memory_order_acquire);
  if (durability == nullptr) return out;
  const DurabilityStats st = durability->stats();
  auto scalar = [&](const char* name, const char* help, MetricType type,
                    double value) {
    out.push_back(MakeFamily(name, help, type));
    AddSample(out.back(), {}, value);
  };
  scalar("exposure_filter_wal_writable",
         "1 while the write-ahead log accepts writes; 0 while it is failed "
         "(disk full, read-only, I/O or fsync error): writes answer "
         "UNAVAILABLE, reads are served, recovery is retried every second.",
         MetricType::Gauge, st.wal_writable ? 1 : 0);
  scalar("exposure_filter_wal_failures_total",
         "Times the write-ahead log went from writable to failed.",
         MetricType::Counter, static_cast<double>(st.wal.failures));
  scalar("exposure_filter_wal_recoveries_total",
         "Times a failed write-ahead log became writable again (a snapshot "
         "covered the failed segment).",
         MetricType::Counter, static_cast<double>(st.wal.recoveries));
  out.push_back(MakeFamily(
      "exposure_filter_disk_errors_total",
      "Failed disk operations of the log and snapshots, by operation "
      "(wal_write, wal_sync, wal_create, snapshot) and error (no_space, "
      "read_only, io, other).",
      MetricType::Counter));
  MetricFamily& errors = out.back();
  const DiskErrorCounts& counts = durability->disk_errors();
  for (size_t op = 0; op < kNumDiskOps; ++op) {
    for (size_t kind = 0; kind < kNumDiskErrorKinds; ++kind) {
      const DiskOp o = static_cast<DiskOp>(op);
      const DiskErrorKind k = static_cast<DiskErrorKind>(kind);
      AddSample(errors,
                {{"op", std::string(DiskOpName(o))},
                 {"error", std::string(DiskErrorKindName(k))}},
                static_cast<double>(counts.Get(o, k)));
    }
  }
  scalar("exposure_filter_snapshots_total", "Snapshots written.",
         MetricType::Counter, static_cast<double>(st.snapshots_written));
  scalar("exposure_filter_snapshot_failures_total",
         "Snapshots that failed (the previous one is kept).",
         MetricType::Counter, static_cast<double>(st.snapshot_failures));
  return out;
}

}  // namespace exposure_filter
