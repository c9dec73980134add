// FaultyDiskIo: the DiskIo seam (src/persist/posix_file.h) with failures a
// test switches on and off: write(2) failing with ENOSPC after letting some
// bytes through (a disk filling up mid-record), fdatasync failing with EIO.
// Rules match on a substring of the file's path ("wal-", "snapshot-").
// Thread-safe: the log's leaders and the snapshot thread call it at once.
#ifndef EXPOSURE_FILTER_TESTS_PERSIST_FAULTY_DISK_IO_H_
#define EXPOSURE_FILTER_TESTS_PERSIST_FAULTY_DISK_IO_H_

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "src/persist/posix_file.h"
#include "src/store/annotated_mutex.h"

namespace exposure_filter::testing_util {

class FaultyDiskIo : public DiskIo {
 public:
  // Writes to matching files fail with `err` once `allow_bytes` more bytes
  // have been written to them.
  void FailWrites(std::string path_part, int err, size_t allow_bytes = 0) {
    MutexLock lock(&mu_);
    writes_ = Rule{std::move(path_part), err, allow_bytes};
  }
  // fdatasync (and directory fsync) of matching paths fail with `err`.
  void FailSyncs(std::string path_part, int err) {
    MutexLock lock(&mu_);
    syncs_ = Rule{std::move(path_part), err, 0};
  }
  void Heal() {
    MutexLock lock(&mu_);
    writes_.reset();
    syncs_.reset();
  }
  // fdatasync calls made on `path` (failed ones included).
  int SyncCalls(const std::string& path) const {
    MutexLock lock(&mu_);
    auto it = sync_calls_.find(path);
    return it == sync_calls_.end() ? 0 : it->second;
  }

  ssize_t Write(int fd, const char* data, size_t size,
                absl::string_view path) override {
    {
      MutexLock lock(&mu_);
      if (writes_.has_value() && absl::StrContains(path, writes_->path_part)) {
        if (writes_->allow_bytes == 0) {
          errno = writes_->err;
          return -1;
        }
        size = std::min(size, writes_->allow_bytes);
        writes_->allow_bytes -= size;
      }
    }
    return DiskIo::Write(fd, data, size, path);
  }
  int Fdatasync(int fd, absl::string_view path) override {
    {
      MutexLock lock(&mu_);
      ++sync_calls_[std::string(path)];
      if (syncs_.has_value() && absl::StrContains(path, syncs_->path_part)) {
        errno = syncs_->err;
        return -1;
      }
    }
    return DiskIo::Fdatasync(fd, path);
  }
  int FsyncDirectory(int fd, absl::string_view path) override {
    {
      MutexLock lock(&mu_);
      if (syncs_.has_value() && absl::StrContains(path, syncs_->path_part)) {
        errno = syncs_->err;
        return -1;
      }
    }
    return DiskIo::FsyncDirectory(fd, path);
  }

 private:
  struct Rule {
    std::string path_part;
    int err;
    size_t allow_bytes;
  };
  // std::mutex underneath, which TSan sees (Debian's absl is not
  // instrumented).
  mutable Mutex mu_;
  std::optional<Rule> writes_ ABSL_GUARDED_BY(mu_);
  std::optional<Rule> syncs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> sync_calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exposure_filter::testing_util

#endif  // EXPOSURE_FILTER_TESTS_PERSIST_FAULTY_DISK_IO_H_
