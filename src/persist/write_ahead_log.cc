#include "src/persist/write_ahead_log.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/persist/posix_file.h"
#include "src/persist/record_frame.h"

namespace exposure_filter {
namespace {

// Creates a segment file holding only its header, durably: the file, then
// the directory entry. A segment that could not be made whole is removed
// again, so the next attempt can create it afresh.
absl::StatusOr<int> CreateSegment(const DataDir& dir, uint64_t seq) {
  const std::string path = dir.WalPath(seq);
  const int fd = ::open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create", path);
  absl::Status s =
      WriteFully(fd, EncodeFileHeader(kWalMagic, seq), path, dir.io());
  if (s.ok()) s = SyncFile(fd, path, dir.io());
  if (s.ok()) s = SyncDirectory(dir.path(), dir.io());
  if (!s.ok()) {
    ::close(fd);
    ::unlink(path.c_str());
    return s;
  }
  return fd;
}

}  // namespace

absl::StatusOr<FsyncPolicy> ParseFsyncPolicy(absl::string_view name) {
  if (name == "always") return FsyncPolicy::kAlways;
  if (name == "interval") return FsyncPolicy::kInterval;
  if (name == "never") return FsyncPolicy::kNever;
  return absl::InvalidArgumentError(absl::StrCat(
      "--fsync must be always, interval or never, got \"", name, "\""));
}

absl::string_view FsyncPolicyName(FsyncPolicy policy) {
  switch (policy) {
    case FsyncPolicy::kAlways:
      return "always";
    case FsyncPolicy::kInterval:
      return "interval";
    case FsyncPolicy::kNever:
      return "never";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<WriteAheadLog>> WriteAheadLog::Create(
    const DataDir* dir, uint64_t seq, FsyncPolicy policy,
    DiskErrorCounts* errors) {
  absl::StatusOr<int> fd = CreateSegment(*dir, seq);
  if (!fd.ok()) {
    if (errors != nullptr) errors->Add(DiskOp::kWalCreate, fd.status());
    return fd.status();
  }
  return std::unique_ptr<WriteAheadLog>(
      new WriteAheadLog(dir, seq, *fd, policy, errors));
}

WriteAheadLog::WriteAheadLog(const DataDir* dir, uint64_t seq, int fd,
                             FsyncPolicy policy, DiskErrorCounts* errors)
    : dir_(dir),
      policy_(policy),
      errors_(errors),
      fd_(fd),
      seq_(seq),
      segment_bytes_(kFileHeaderBytes),
      file_bytes_(kFileHeaderBytes) {}

WriteAheadLog::~WriteAheadLog() { Close().IgnoreError(); }

uint64_t WriteAheadLog::Append(uint8_t type, absl::string_view body) {
  MutexLock lock(&mu_);
  if (!error_.ok() || fd_ < 0) return appended_lsn_;
  const size_t before = buffer_.size();
  AppendFrame(type, body, &buffer_);
  const uint64_t bytes = buffer_.size() - before;
  segment_bytes_ += bytes;
  stats_.bytes += bytes;
  ++stats_.records;
  return ++appended_lsn_;
}

uint64_t WriteAheadLog::DurableLsnLocked() const {
  return policy_ == FsyncPolicy::kAlways ? synced_lsn_ : written_lsn_;
}

void WriteAheadLog::WaitNotFlushingLocked() {
  mu_.Await(flushed_,
            [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !flushing_; });
}

void WriteAheadLog::FlushLocked(bool sync) {
  flushing_ = true;
  std::string batch;
  batch.swap(spare_);
  batch.swap(buffer_);  // buffer_ continues in the spare's capacity
  const uint64_t target = appended_lsn_;
  const int fd = fd_;
  const std::string path = dir_->WalPath(seq_);
  mu_.Unlock();
  // Other writers keep appending to buffer_ while this one is on disk.
  absl::Status s;
  DiskOp op = DiskOp::kWalWrite;
  if (!batch.empty()) s = WriteFully(fd, batch, path, dir_->io());
  uint64_t sync_micros = 0;
  if (s.ok() && sync) {
    op = DiskOp::kWalSync;
    // Steady clock: a wall-clock step must not show as a slow disk.
    const auto sync_start = std::chrono::steady_clock::now();
    s = SyncFile(fd, path, dir_->io());
    sync_micros = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - sync_start)
                      .count();
  }
  const uint64_t batch_bytes = batch.size();
  batch.clear();
  mu_.Lock();
  spare_.swap(batch);  // hand the emptied capacity back for the next leader
  if (!s.ok()) {
    // Written but not synced still counts as whole: the cut of a recovery
    // rotation keeps it (those records are in memory and the snapshot
    // anyway).
    if (op == DiskOp::kWalSync) file_bytes_ += batch_bytes;
    FailLocked(op, s);
  } else {
    file_bytes_ += batch_bytes;
    if (target > written_lsn_) {
      written_lsn_ = target;
      ++stats_.writes;
    }
    if (sync) {
      synced_lsn_ = std::max(synced_lsn_, target);
      ++stats_.syncs;
      const auto bound =
          std::lower_bound(kWalSyncBucketBoundsMicros.begin(),
                           kWalSyncBucketBoundsMicros.end(), sync_micros);
      ++stats_.sync_buckets[bound - kWalSyncBucketBoundsMicros.begin()];
      stats_.sync_micros += sync_micros;
    }
  }
  flushing_ = false;
  flushed_.notify_all();
}

void WriteAheadLog::FailLocked(DiskOp op, const absl::Status& s) {
  if (errors_ != nullptr) errors_->Add(op, s);
  if (!error_.ok()) return;
  error_ = s;
  if (healing_) return;  // StoreDurability reports failed recoveries
  ++stats_.failures;
  // Once per failure, not per rejected write.
  spdlog::error(
      "write-ahead log failed ({}): {}; writes answer UNAVAILABLE and nothing "
      "more is acknowledged until a snapshot can be written to {} (retried "
      "every second); reads are served from memory",
      std::string(DiskOpName(op)), std::string(s.message()), dir_->path());
}

absl::Status WriteAheadLog::Commit() {
  MutexLock lock(&mu_);
  const uint64_t lsn = appended_lsn_;
  while (error_.ok()) {
    const bool written = DurableLsnLocked() >= lsn;
    if (written && !healing_) return absl::OkStatus();
    if (flushing_) {
      // A leader is writing; its batch may already hold our records.
      WaitNotFlushingLocked();
      continue;
    }
    if (written) {
      // Written to a segment that follows a poisoned one: durable only
      // once the recovery snapshot covers the poisoned one.
      mu_.Await(flushed_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !healing_ || !error_.ok();
      });
      continue;
    }
    if (fd_ < 0) return absl::FailedPreconditionError("write-ahead log closed");
    FlushLocked(policy_ == FsyncPolicy::kAlways);
  }
  return error_;
}

absl::Status WriteAheadLog::Sync() {
  MutexLock lock(&mu_);
  WaitNotFlushingLocked();
  if (!error_.ok() || fd_ < 0) return error_;
  if (synced_lsn_ == appended_lsn_ && buffer_.empty()) return absl::OkStatus();
  FlushLocked(/*sync=*/true);
  return error_;
}

absl::StatusOr<uint64_t> WriteAheadLog::Rotate() {
  MutexLock lock(&mu_);
  WaitNotFlushingLocked();
  if (!error_.ok()) return RotateAfterFailureLocked();
  if (fd_ < 0) return absl::FailedPreconditionError("write-ahead log closed");
  // Finish the old segment as a leader would, then swap files while
  // appenders keep buffering (their records belong to the new segment).
  FlushLocked(/*sync=*/true);
  if (!error_.ok()) return error_;
  flushing_ = true;
  const uint64_t closed = seq_;
  const int old_fd = fd_;
  mu_.Unlock();
  ::close(old_fd);
  absl::StatusOr<int> fd = CreateSegment(*dir_, closed + 1);
  mu_.Lock();
  flushing_ = false;
  flushed_.notify_all();
  if (!fd.ok()) {
    fd_ = -1;
    FailLocked(DiskOp::kWalCreate, fd.status());
    return error_;
  }
  fd_ = *fd;
  seq_ = closed + 1;
  segment_bytes_ = kFileHeaderBytes + buffer_.size();
  file_bytes_ = kFileHeaderBytes;
  return closed;
}

absl::StatusOr<uint64_t> WriteAheadLog::RotateAfterFailureLocked() {
  flushing_ = true;  // keeps leaders and other rotations out meanwhile
  const uint64_t closed = seq_;
  const int old_fd = fd_;
  const uint64_t whole = file_bytes_;
  const std::string old_path = dir_->WalPath(seq_);
  fd_ = -1;
  mu_.Unlock();
  if (old_fd >= 0) {
    // Best effort: only a fallback to the snapshot before the recovery
    // snapshot ever reads this segment again, and a whole last batch lets
    // it replay to the end. Never fdatasync'ed again (see the header).
    if (::ftruncate(old_fd, static_cast<off_t>(whole)) != 0) {
      spdlog::warn("cannot cut poisoned log segment {} back to {} bytes: {}",
                   old_path, whole,
                   std::string(ErrnoStatus("ftruncate", old_path).message()));
    }
    ::close(old_fd);
  }
  absl::StatusOr<int> fd = CreateSegment(*dir_, closed + 1);
  mu_.Lock();
  flushing_ = false;
  flushed_.notify_all();
  if (!fd.ok()) {
    if (errors_ != nullptr) errors_->Add(DiskOp::kWalCreate, fd.status());
    // The current reason is what an operator needs (full may have become
    // read-only); still failed, still not counted as a new failure.
    error_ = fd.status();
    return error_;
  }
  // Every record appended so far, written, dropped or lost with the
  // poisoned segment, was applied to the store before it was appended: the
  // caller's snapshot holds them all.
  buffer_.clear();
  fd_ = *fd;
  seq_ = closed + 1;
  segment_bytes_ = kFileHeaderBytes;
  file_bytes_ = kFileHeaderBytes;
  written_lsn_ = synced_lsn_ = appended_lsn_;
  error_ = absl::OkStatus();
  healing_ = true;
  return closed;
}

void WriteAheadLog::FinishHealing(const absl::Status& snapshot) {
  MutexLock lock(&mu_);
  if (!healing_) return;
  healing_ = false;
  if (!snapshot.ok()) {
    // Failed again; the segment opened by the rotation is the one the next
    // recovery rotation closes.
    if (error_.ok()) error_ = snapshot;
  } else if (error_.ok()) {
    ++stats_.recoveries;
    spdlog::info(
        "write-ahead log writable again: a snapshot covers the failed "
        "segment, writes continue in {}",
        dir_->WalPath(seq_));
  }
  flushed_.notify_all();
}

absl::Status WriteAheadLog::status() const {
  MutexLock lock(&mu_);
  return error_;
}

bool WriteAheadLog::healing() const {
  MutexLock lock(&mu_);
  return healing_;
}

absl::Status WriteAheadLog::Close() {
  absl::Status s = Sync();
  MutexLock lock(&mu_);
  WaitNotFlushingLocked();
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  return s;
}

uint64_t WriteAheadLog::current_segment() const {
  MutexLock lock(&mu_);
  return seq_;
}

uint64_t WriteAheadLog::segment_bytes() const {
  MutexLock lock(&mu_);
  return segment_bytes_;
}

WalStats WriteAheadLog::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace exposure_filter
