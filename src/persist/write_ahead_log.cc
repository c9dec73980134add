#include "src/persist/write_ahead_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/persist/posix_file.h"
#include "src/persist/record_frame.h"

namespace exposure_filter {
namespace {

// Creates a segment file holding only its header, durably: the file, then
// the directory entry.
absl::StatusOr<int> CreateSegment(const DataDir& dir, uint64_t seq) {
  const std::string path = dir.WalPath(seq);
  const int fd = ::open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create", path);
  absl::Status s = WriteFully(fd, EncodeFileHeader(kWalMagic, seq), path);
  if (s.ok()) s = SyncFile(fd, path);
  if (s.ok()) s = SyncDirectory(dir.path());
  if (!s.ok()) {
    ::close(fd);
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
    const DataDir* dir, uint64_t seq, FsyncPolicy policy) {
  absl::StatusOr<int> fd = CreateSegment(*dir, seq);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<WriteAheadLog>(
      new WriteAheadLog(dir, seq, *fd, policy));
}

WriteAheadLog::WriteAheadLog(const DataDir* dir, uint64_t seq, int fd,
                             FsyncPolicy policy)
    : dir_(dir),
      policy_(policy),
      fd_(fd),
      seq_(seq),
      segment_bytes_(kFileHeaderBytes) {}

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
  if (!batch.empty()) s = WriteFully(fd, batch, path);
  if (s.ok() && sync) s = SyncFile(fd, path);
  batch.clear();
  mu_.Lock();
  spare_.swap(batch);  // hand the emptied capacity back for the next leader
  if (!s.ok()) {
    if (error_.ok()) error_ = s;
  } else {
    if (target > written_lsn_) {
      written_lsn_ = target;
      ++stats_.writes;
    }
    if (sync) {
      synced_lsn_ = std::max(synced_lsn_, target);
      ++stats_.syncs;
    }
  }
  flushing_ = false;
  flushed_.notify_all();
}

absl::Status WriteAheadLog::Commit() {
  MutexLock lock(&mu_);
  const uint64_t lsn = appended_lsn_;
  while (error_.ok() && DurableLsnLocked() < lsn) {
    if (flushing_) {
      // A leader is writing; its batch may already hold our records.
      WaitNotFlushingLocked();
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
  if (!error_.ok()) return error_;
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
    if (error_.ok()) error_ = fd.status();
    return error_;
  }
  fd_ = *fd;
  seq_ = closed + 1;
  segment_bytes_ = kFileHeaderBytes + buffer_.size();
  return closed;
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
