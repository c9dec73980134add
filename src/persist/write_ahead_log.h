// WriteAheadLog: the append side of the log, with group commit.
//
// Append() only copies a framed record into an in-memory buffer under a
// short lock (the store calls it while holding a shard lock). Commit() makes
// everything appended so far durable to the configured degree before an RPC
// answers: the first committer to find no write in progress becomes the
// leader and writes the whole buffer, records of every writer waiting, with
// one write(2) (and one fdatasync under `always`); the others wait for it and
// usually find their records already covered. Under load, one system call
// serves many RPCs.
//
// Fsync policy (as Redis' appendfsync):
//   always    Commit returns after fdatasync: an acknowledged write survives
//             power loss.
//   interval  Commit returns after write(2): survives a crash of the process
//             (kill -9); Sync(), run every --fsync_interval, bounds what a
//             power loss can take.
//   never     as interval, and the OS decides when to flush.
//
// The log is a series of segment files (data_dir.h). Rotate() closes the
// current one durably and opens the next, so a snapshot can cover exactly
// the closed segments.
//
// Disk faults (docs/reliability.md "Disk faults"). After a failed
// write(2) or fdatasync the log is *failed*: every Commit returns the error
// (the server answers UNAVAILABLE) rather than acknowledging writes that may
// not be on disk, and Appends are dropped. The segment is poisoned: it may
// end in part of a record, and after a failed fdatasync the kernel may
// already have dropped the unwritten pages and marked them clean, so a
// second fdatasync on the same file could "succeed" over lost data
// (PostgreSQL's fsyncgate). It is never synced again. Instead the next
// Rotate() is a recovery rotation: it cuts the poisoned segment back to its
// last whole batch (best effort), closes it unsynced, opens the next
// segment and clears the error, but holds every acknowledgement
// (healing()) until FinishHealing() reports a snapshot covering the
// poisoned segment durable. That snapshot is written from memory, which
// holds every record ever appended (the store applies before it appends),
// including the ones whose write failed, so nothing is lost, the poisoned
// segment is never needed again, and recovery never sees a half-written
// record followed by good ones. StoreDurability retries this every second
// until the disk takes the writes again.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_WRITE_AHEAD_LOG_H_
#define EXPOSURE_FILTER_SRC_PERSIST_WRITE_AHEAD_LOG_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/persist/data_dir.h"
#include "src/persist/disk_errors.h"
#include "src/store/annotated_mutex.h"

namespace exposure_filter {

enum class FsyncPolicy { kAlways, kInterval, kNever };

absl::StatusOr<FsyncPolicy> ParseFsyncPolicy(absl::string_view name);
absl::string_view FsyncPolicyName(FsyncPolicy policy);

// Upper bounds (µs) of the fdatasync latency buckets, for the
// exposure_filter_wal_fsync_seconds histogram. A datacenter SSD syncs in
// 0.1-2 ms, a network block device (EBS, PD) in 1-10 ms; 100 ms and up means
// a saturated or failing disk, the range an operator must tell apart.
inline constexpr std::array<uint64_t, 12> kWalSyncBucketBoundsMicros = {
    100,    250,    500,     1'000,   2'500,     5'000,
    10'000, 25'000, 100'000, 250'000, 1'000'000, 5'000'000};

struct WalStats {
  uint64_t records = 0;
  uint64_t bytes = 0;       // appended, frames included
  uint64_t writes = 0;      // write(2) batches (group commits)
  uint64_t syncs = 0;       // fdatasync calls
  uint64_t failures = 0;    // times the log went from healthy to failed
  uint64_t recoveries = 0;  // times it became writable again (FinishHealing)
  // Successful fdatasync calls by latency: bucket i counts those at or under
  // kWalSyncBucketBoundsMicros[i] and over the previous bound (not
  // cumulative); the last bucket is over the largest bound.
  std::array<uint64_t, kWalSyncBucketBoundsMicros.size() + 1> sync_buckets{};
  uint64_t sync_micros = 0;  // their total latency
};

class WriteAheadLog {
 public:
  // Creates segment `seq` in `dir` (which must outlive the log), writes its
  // header and makes the file's existence durable. Failed disk operations
  // are counted in `errors` (may be null; must outlive the log).
  static absl::StatusOr<std::unique_ptr<WriteAheadLog>> Create(
      const DataDir* dir, uint64_t seq, FsyncPolicy policy,
      DiskErrorCounts* errors = nullptr);
  ~WriteAheadLog();
  WriteAheadLog(const WriteAheadLog&) = delete;
  WriteAheadLog& operator=(const WriteAheadLog&) = delete;

  // Buffers one framed record; returns its log sequence number (1, 2, ...).
  // Never does I/O. Dropped while the log is failed (the record is in the
  // store, and the recovery snapshot will hold it).
  uint64_t Append(uint8_t type, absl::string_view body);
  // Returns once every record appended before the call is written (and
  // fdatasynced under `always`) and no recovery rotation awaits its
  // snapshot; the error if the log has failed.
  absl::Status Commit();
  // Writes what is buffered and fdatasyncs, whatever the policy (the
  // interval timer, rotation and shutdown). A failure fails the log.
  absl::Status Sync();
  // Makes the current segment complete and durable, continues in the next
  // one; returns the number of the segment it closed. On a failed log, a
  // recovery rotation (see above): the caller must then snapshot every
  // segment <= the returned one and call FinishHealing().
  absl::StatusOr<uint64_t> Rotate();
  // After a recovery rotation: `snapshot` is the outcome of the snapshot
  // covering the poisoned segment. OK makes the log writable (held Commits
  // return OK); an error fails it again with that error.
  void FinishHealing(const absl::Status& snapshot);
  // Sync() and close; later Appends are dropped and Commits fail.
  absl::Status Close();

  // OK while writes can be accepted (healthy, or healing: Commits wait);
  // the error that failed the log otherwise.
  absl::Status status() const;
  // A recovery rotation awaits its snapshot.
  bool healing() const;

  uint64_t current_segment() const;
  // Bytes logged into the current segment so far (header included).
  uint64_t segment_bytes() const;
  WalStats stats() const;
  FsyncPolicy policy() const { return policy_; }

 private:
  WriteAheadLog(const DataDir* dir, uint64_t seq, int fd, FsyncPolicy policy,
                DiskErrorCounts* errors);
  // Fails the log with `s` (the first error wins), logging it once.
  void FailLocked(DiskOp op, const absl::Status& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The recovery rotation of Rotate().
  absl::StatusOr<uint64_t> RotateAfterFailureLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the buffer out as the single leader (flushing_ must be false);
  // fdatasyncs when `sync`. Releases mu_ during the I/O.
  void FlushLocked(bool sync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WaitNotFlushingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t DurableLsnLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DataDir* const dir_;
  const FsyncPolicy policy_;
  DiskErrorCounts* const errors_;  // may be null

  mutable Mutex mu_;
  std::condition_variable flushed_;
  std::string buffer_ ABSL_GUARDED_BY(mu_);
  std::string spare_ ABSL_GUARDED_BY(mu_);  // the buffer a leader hands back
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  int fd_ ABSL_GUARDED_BY(mu_);
  uint64_t seq_ ABSL_GUARDED_BY(mu_);
  uint64_t segment_bytes_ ABSL_GUARDED_BY(mu_);
  // File size after the last batch written whole: where a recovery
  // rotation cuts a poisoned segment.
  uint64_t file_bytes_ ABSL_GUARDED_BY(mu_);
  uint64_t appended_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t synced_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool healing_ ABSL_GUARDED_BY(mu_) = false;
  WalStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_WRITE_AHEAD_LOG_H_
