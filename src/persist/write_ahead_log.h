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
// After an I/O error the log is failed for good: every later Commit returns
// the error (the server answers UNAVAILABLE) rather than acknowledging
// writes that may not be on disk.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_WRITE_AHEAD_LOG_H_
#define EXPOSURE_FILTER_SRC_PERSIST_WRITE_AHEAD_LOG_H_

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
#include "src/store/annotated_mutex.h"

namespace exposure_filter {

enum class FsyncPolicy { kAlways, kInterval, kNever };

absl::StatusOr<FsyncPolicy> ParseFsyncPolicy(absl::string_view name);
absl::string_view FsyncPolicyName(FsyncPolicy policy);

struct WalStats {
  uint64_t records = 0;
  uint64_t bytes = 0;   // appended, frames included
  uint64_t writes = 0;  // write(2) batches (group commits)
  uint64_t syncs = 0;   // fdatasync calls
};

class WriteAheadLog {
 public:
  // Creates segment `seq` in `dir` (which must outlive the log), writes its
  // header and makes the file's existence durable.
  static absl::StatusOr<std::unique_ptr<WriteAheadLog>> Create(
      const DataDir* dir, uint64_t seq, FsyncPolicy policy);
  ~WriteAheadLog();
  WriteAheadLog(const WriteAheadLog&) = delete;
  WriteAheadLog& operator=(const WriteAheadLog&) = delete;

  // Buffers one framed record; returns its log sequence number (1, 2, ...).
  // Never does I/O.
  uint64_t Append(uint8_t type, absl::string_view body);
  // Returns once every record appended before the call is written (and
  // fdatasynced under `always`); the error if the log has failed.
  absl::Status Commit();
  // Writes what is buffered and fdatasyncs, whatever the policy (the
  // interval timer, rotation and shutdown).
  absl::Status Sync();
  // Makes the current segment complete and durable, continues in the next
  // one; returns the number of the segment it closed.
  absl::StatusOr<uint64_t> Rotate();
  // Sync() and close; later Appends are dropped and Commits fail.
  absl::Status Close();

  uint64_t current_segment() const;
  // Bytes logged into the current segment so far (header included).
  uint64_t segment_bytes() const;
  WalStats stats() const;
  FsyncPolicy policy() const { return policy_; }

 private:
  WriteAheadLog(const DataDir* dir, uint64_t seq, int fd, FsyncPolicy policy);
  // Writes the buffer out as the single leader (flushing_ must be false);
  // fdatasyncs when `sync`. Releases mu_ during the I/O.
  void FlushLocked(bool sync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WaitNotFlushingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t DurableLsnLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DataDir* const dir_;
  const FsyncPolicy policy_;

  mutable Mutex mu_;
  std::condition_variable flushed_;
  std::string buffer_ ABSL_GUARDED_BY(mu_);
  std::string spare_ ABSL_GUARDED_BY(mu_);  // the buffer a leader hands back
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  int fd_ ABSL_GUARDED_BY(mu_);
  uint64_t seq_ ABSL_GUARDED_BY(mu_);
  uint64_t segment_bytes_ ABSL_GUARDED_BY(mu_);
  uint64_t appended_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t synced_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  WalStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_WRITE_AHEAD_LOG_H_
