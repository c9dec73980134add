#include "src/server/observability/durability_metrics.h"

#include <limits>
#include <string>

#include "src/persist/disk_errors.h"
#include "src/server/observability/metric_families.h"

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
  if (st.last_snapshot_finished != absl::InfinitePast()) {
    // Absent before the first snapshot, so `time() - x` alerts yield
    // nothing rather than the age of the epoch.
    scalar(
        "exposure_filter_last_snapshot_timestamp_seconds",
        "Unix time the last good snapshot finished.", MetricType::Gauge,
        absl::ToDoubleSeconds(st.last_snapshot_finished - absl::UnixEpoch()));
  }
  scalar("exposure_filter_last_snapshot_bytes",
         "Size of the last good snapshot.", MetricType::Gauge,
         static_cast<double>(st.last_snapshot_bytes));
  scalar("exposure_filter_last_snapshot_users",
         "Users in the last good snapshot.", MetricType::Gauge,
         static_cast<double>(st.last_snapshot_users));

  scalar("exposure_filter_wal_records_total",
         "Records appended to the write-ahead log.", MetricType::Counter,
         static_cast<double>(st.wal.records));
  scalar("exposure_filter_wal_bytes_total",
         "Bytes appended to the write-ahead log, frames included.",
         MetricType::Counter, static_cast<double>(st.wal.bytes));
  scalar("exposure_filter_wal_writes_total",
         "Group commits: write(2) batches, each covering the records of "
         "every writer waiting.",
         MetricType::Counter, static_cast<double>(st.wal.writes));
  scalar("exposure_filter_wal_syncs_total",
         "fdatasync calls on the write-ahead log (per commit under "
         "--fsync=always, per --fsync_interval under interval).",
         MetricType::Counter, static_cast<double>(st.wal.syncs));
  out.push_back(MakeFamily("exposure_filter_wal_fsync_seconds",
                           "Latency of successful fdatasync calls on the "
                           "write-ahead log.",
                           MetricType::Histogram));
  prometheus::ClientMetric fsync;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < st.wal.sync_buckets.size(); ++i) {
    cumulative += st.wal.sync_buckets[i];
    const double bound =
        i < kWalSyncBucketBoundsMicros.size()
            ? static_cast<double>(kWalSyncBucketBoundsMicros[i]) / 1e6
            : std::numeric_limits<double>::infinity();
    fsync.histogram.bucket.push_back({cumulative, bound});
  }
  fsync.histogram.sample_count = cumulative;
  fsync.histogram.sample_sum = static_cast<double>(st.wal.sync_micros) / 1e6;
  out.back().metric.push_back(std::move(fsync));

  scalar("exposure_filter_recovery_duration_seconds",
         "How long startup recovery (snapshot load + log replay) took.",
         MetricType::Gauge, absl::ToDoubleSeconds(recovery_.duration));
  scalar("exposure_filter_recovery_users_loaded",
         "Users loaded from the snapshot at startup.", MetricType::Gauge,
         static_cast<double>(recovery_.users_loaded));
  scalar("exposure_filter_recovery_wal_records",
         "Write-ahead log records replayed at startup.", MetricType::Gauge,
         static_cast<double>(recovery_.wal_records));
  scalar("exposure_filter_recovery_snapshots_skipped",
         "Damaged snapshots passed over at startup.", MetricType::Gauge,
         static_cast<double>(recovery_.snapshots_skipped));
  scalar("exposure_filter_recovery_torn_tails",
         "Torn final records skipped at startup (a crash mid-write).",
         MetricType::Gauge, static_cast<double>(recovery_.torn_tails));
  scalar("exposure_filter_recovery_corrupt",
         "1 if replay stopped early at a corrupt record at startup (the log "
         "line says where).",
         MetricType::Gauge, recovery_.corrupt ? 1 : 0);
  return out;
}

}  // namespace exposure_filter
