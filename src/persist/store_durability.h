// StoreDurability: makes a ShardedFilterStore survive restarts and crashes.
//
// It is the store's journal (store_journal.h): every applied change is
// appended to the write-ahead log under the user's shard lock, and an RPC
// calls Commit() before it answers OK. Snapshots rotate the log first (so
// the closed segments hold only changes the store already has), then write
// the store one shard at a time. A snapshot covering segment s makes the
// segments <= the *previous* snapshot obsolete: the newest two snapshots
// and the log since the older one are kept, so a damaged newest snapshot
// can fall back to the one before it.
//
// Recovery (Recover(), before serving): the newest snapshot that loads
// cleanly (falling back to older ones, then to an empty store), then every
// log segment after it in order. Aging applies: slices and events past the
// retention window are dropped. A torn final record is truncated away and
// counted; corruption stops replay at the last good record with one error
// line, or, with strict_recovery, fails recovery.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_STORE_DURABILITY_H_
#define EXPOSURE_FILTER_SRC_PERSIST_STORE_DURABILITY_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/persist/consumer_offsets_record.h"
#include "src/persist/data_dir.h"
#include "src/persist/disk_errors.h"
#include "src/persist/snapshot.h"
#include "src/persist/sync_timer.h"
#include "src/persist/write_ahead_log.h"
#include "src/store/annotated_mutex.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/store_journal.h"
#include "src/store/surface_registry.h"
#include "src/store/trace_journal.h"
#include "src/store/trace_log.h"

namespace exposure_filter {

struct DurabilityOptions {
  // Where the log and snapshots live. Empty means "not durable": the server
  // keeps everything in memory only (the --data_dir flag defaults to ./data).
  std::string data_dir;
  FsyncPolicy fsync = FsyncPolicy::kInterval;
  absl::Duration fsync_interval = absl::Seconds(1);
  // Snapshot when this much time has passed since the last one (zero: never
  // by time) or the current log segment reaches this size (zero: never by
  // size), whichever comes first.
  absl::Duration snapshot_interval = absl::Minutes(10);
  uint64_t snapshot_wal_bytes = uint64_t{256} << 20;
  // Refuse to start on any corruption instead of starting with what loaded.
  bool strict_recovery = false;
  // Disk faults: tests inject failing system calls here; null is
  // the real ones. Must outlive the StoreDurability.
  DiskIo* disk_io = nullptr;
  // When the `interval` policy syncs: tests fire it by hand; null is a
  // RealSyncTimer. Must outlive the StoreDurability, which Stop()s it.
  SyncTimer* sync_timer = nullptr;
};

struct RecoveryReport {
  uint64_t snapshot_seq = 0;       // 0: none loaded
  uint64_t snapshots_skipped = 0;  // damaged ones passed over
  uint64_t users_loaded = 0;       // from the snapshot
  uint64_t expired_users = 0;      // in the snapshot but aged out since
  uint64_t wal_segments = 0;
  uint64_t wal_records = 0;      // replayed
  uint64_t torn_tail_bytes = 0;  // skipped torn final record(s)
  uint64_t torn_tails = 0;
  bool corrupt = false;    // replay stopped early at corruption
  std::string corruption;  // the error line, if any
  absl::Duration duration;
  SnapshotMetadata metadata;  // of the loaded snapshot
  // Traced users, when a TraceLog is attached.
  uint64_t trace_users = 0;    // traced after recovery
  uint64_t trace_entries = 0;  // restored from the snapshot
  uint64_t trace_records = 0;  // trace log records replayed
  // Recovery could not prove the trace complete (torn or corrupt log, or an
  // exposure of a traced user logged without its trace record), so every
  // traced user now counts as traced since the restart.
  bool trace_reset = false;
  // Kafka ingest: consumed offsets of the snapshot plus the log
  // records after it (empty topic: none were ever logged).
  ConsumerOffsets consumer_offsets;
};

// Snapshot metadata key holding TraceLog::Export().
inline constexpr char kTraceLogMetadataKey[] = "trace_log";

struct DurabilityStats {
  WalStats wal;
  uint64_t snapshots_written = 0;
  uint64_t snapshot_failures = 0;
  uint64_t last_snapshot_bytes = 0;
  uint64_t last_snapshot_users = 0;
  // Wall-clock time the last good snapshot finished (InfinitePast before
  // the first): exported as a Unix timestamp so `time() - x` is its age on
  // the Prometheus server's clock, as for any *_timestamp_seconds series.
  absl::Time last_snapshot_finished = absl::InfinitePast();
  // Disk faults: false while the log is failed and writes are
  // refused; wal_error says why.
  bool wal_writable = true;
  std::string wal_error;
};

class StoreDurability final : public StoreJournal, public TraceJournal {
 public:
  // Takes the data directory's lock (FailedPrecondition if another process
  // holds it). `surfaces` and `store` must outlive this object.
  static absl::StatusOr<std::unique_ptr<StoreDurability>> Open(
      const DurabilityOptions& options, SurfaceRegistry* surfaces,
      ShardedFilterStore* store);
  ~StoreDurability() override;

  // Loads the store (which must be empty and not yet in use), then starts
  // logging to a new segment and the background fsync and snapshot threads.
  // Fails on I/O errors, configuration mismatches and, when strict, on
  // corruption.
  absl::StatusOr<RecoveryReport> Recover();

  // Waits until every change applied so far is logged to the configured
  // degree (group commit). An error means it may not survive a crash.
  absl::Status Commit();
  // OK while writes are accepted; the log's error while it is failed (disk
  // full, read-only, I/O error) and until a recovery snapshot succeeds.
  // Writers check it before changing the store, so a refused write leaves
  // no trace in memory.
  absl::Status WriteStatus() const;
  // Rotates the log and writes a snapshot now.
  absl::Status Snapshot();
  // Stops the background threads, detaches from the store, writes a final
  // snapshot when asked, and closes the log. Call after the last writer.
  absl::Status Close(bool final_snapshot);

  // Makes `trace_log` (traced users) durable too: snapshots carry its
  // export, the log its changes. Call before Recover(); it must outlive
  // this object.
  void AttachTraceLog(TraceLog* trace_log) { trace_log_ = trace_log; }

  // Extra entries for every snapshot (called while one is written).
  void SetMetadataProvider(std::function<SnapshotMetadata()> provider);
  DurabilityStats stats() const;
  const DiskErrorCounts& disk_errors() const { return disk_errors_; }

  // Kafka ingest. Appends the offsets a batch advanced, after the
  // batch's own records; Commit() then makes both durable at once. It runs
  // under the lock a snapshot holds across its log rotation, so the offsets
  // a snapshot stores are exactly those logged in the segments it covers,
  // whose data the store already holds.
  void LogConsumerOffsets(const ConsumerOffsets& advanced);
  // The recovered offsets plus everything logged since.
  ConsumerOffsets consumer_offsets() const;

  // StoreJournal.
  void OnRecord(absl::string_view surface, absl::string_view user_id,
                int64_t event_ms,
                absl::Span<const uint64_t> item_hashes) override;
  void OnDelete(absl::string_view surface, absl::string_view user_id) override;

  // TraceJournal.
  void OnTraceAdd(absl::Span<const absl::string_view> user_ids,
                  int64_t since_ms) override;
  void OnTraceRemove(absl::Span<const absl::string_view> user_ids) override;
  void OnTraceRecord(absl::string_view surface,
                     const TracedExposure& exposure) override;
  void OnTraceDropUser(absl::string_view surface,
                       absl::string_view user_id) override;

 private:
  StoreDurability(const DurabilityOptions& options,
                  std::unique_ptr<DataDir> dir, SurfaceRegistry* surfaces,
                  ShardedFilterStore* store);
  absl::Status ReplayLog(const DataDir::Listing& listing,
                         RecoveryReport* report);
  // Restores the trace from the loaded snapshot's metadata (and drops it
  // from the report's copy).
  void ImportTrace(RecoveryReport* report);
  // Restores the consumed offsets from the loaded snapshot's metadata.
  absl::Status ImportConsumerOffsets(SnapshotMetadata* metadata);
  absl::Status SnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(snapshot_mu_);
  // One error line per kFailureLogPeriod at most (a failed log is retried
  // every second), with the number held back.
  void LogSnapshotFailure(uint64_t seq, const absl::Status& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(snapshot_mu_);
  void RemoveObsoleteFiles(uint64_t newest)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(snapshot_mu_);
  void SyncLoop();
  void SnapshotLoop();

  const DurabilityOptions options_;
  const std::unique_ptr<DataDir> dir_;
  SurfaceRegistry* const surfaces_;
  ShardedFilterStore* const store_;
  DiskErrorCounts disk_errors_;  // before wal_, which points at it
  std::unique_ptr<WriteAheadLog> wal_;
  TraceLog* trace_log_ = nullptr;  // set before Recover(), then constant

  Mutex snapshot_mu_;  // one snapshot at a time
  // The newest snapshot known good before the latest one (0: the empty
  // state); files it needs are kept.
  uint64_t fallback_snapshot_ ABSL_GUARDED_BY(snapshot_mu_) = 0;
  uint64_t latest_snapshot_ ABSL_GUARDED_BY(snapshot_mu_) = 0;
  // MonotonicTime() (src/store/clock.h): wall-clock steps do not delay or
  // hurry the snapshot interval.
  absl::Time last_snapshot_time_ ABSL_GUARDED_BY(snapshot_mu_);
  absl::Time last_heal_attempt_ ABSL_GUARDED_BY(snapshot_mu_);
  absl::Time next_failure_log_ ABSL_GUARDED_BY(snapshot_mu_) =
      absl::InfinitePast();
  uint64_t failure_logs_held_ ABSL_GUARDED_BY(snapshot_mu_) = 0;
  std::function<SnapshotMetadata()> metadata_provider_
      ABSL_GUARDED_BY(snapshot_mu_);
  mutable Mutex offsets_mu_;  // before the trace's and the log's locks
  ConsumerOffsets offsets_ ABSL_GUARDED_BY(offsets_mu_);
  std::atomic<uint64_t> snapshots_written_{0};
  std::atomic<uint64_t> snapshot_failures_{0};
  std::atomic<uint64_t> last_snapshot_bytes_{0};
  std::atomic<uint64_t> last_snapshot_users_{0};
  // absl::ToUnixMicros of the last good snapshot's end; 0: none yet.
  std::atomic<int64_t> last_snapshot_finished_unix_micros_{0};

  Mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;
  bool closed_ = false;
  RealSyncTimer real_sync_timer_;
  SyncTimer* const sync_timer_;  // options_.sync_timer or real_sync_timer_
  std::thread sync_thread_;
  std::thread snapshot_thread_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_STORE_DURABILITY_H_
