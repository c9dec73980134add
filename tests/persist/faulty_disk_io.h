// FaultyDiskIo: the DiskIo seam (src/persist/posix_file.h) with failures a
// test switches on and off: write(2) failing with ENOSPC after letting some
// bytes through (a disk filling up mid-record), fdatasync failing with EIO.
// Rules match on a substring of the file's path ("wal-", "snapshot-").
// Thread-safe: the log's leaders and the snapshot thread call it at once.
//
// It also models the page cache: it remembers, per file, how
// many bytes the last successful fdatasync covered, and PowerLoss() copies
// a data directory as a power cut would leave it: written-but-unsynced
// bytes gone. A kill -9 loses nothing from the page cache, so only this
// can show a missing fdatasync.
#ifndef EXPOSURE_FILTER_TESTS_PERSIST_FAULTY_DISK_IO_H_
#define EXPOSURE_FILTER_TESTS_PERSIST_FAULTY_DISK_IO_H_

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
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

  // Bytes at the start of `path` that the last successful fdatasync of it
  // covered (the file's size when that call began); 0 if none did.
  uint64_t SyncedBytes(const std::string& path) const {
    MutexLock lock(&mu_);
    auto it = synced_bytes_.find(path);
    return it == synced_bytes_.end() ? 0 : it->second;
  }
  // Writes to `to_dir` (created) what a power cut now would leave of the
  // data directory `from_dir`: each log segment cut to SyncedBytes(), one
  // never synced is gone. Only files written in place are modelled, so a
  // snapshot file (synced under its temporary name, then renamed) makes it
  // fail: tests that use it take no snapshot. Returns an error text, or "".
  std::string PowerLoss(const std::string& from_dir,
                        const std::string& to_dir) const {
    namespace fs = std::filesystem;
    fs::create_directories(to_dir);
    for (const auto& e : fs::directory_iterator(from_dir)) {
      const std::string name = e.path().filename().string();
      if (name == "LOCK") continue;  // taken afresh by the next owner
      if (!absl::StartsWith(name, "wal-")) {
        return "PowerLoss models log segments only, found " + name;
      }
      const uint64_t keep = SyncedBytes(from_dir + "/" + name);
      if (keep == 0) continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::string data((std::istreambuf_iterator<char>(in)),
                       std::istreambuf_iterator<char>());
      if (data.size() < keep) return "file shorter than its synced bytes";
      std::ofstream(to_dir + "/" + name, std::ios::binary)
          << data.substr(0, keep);
    }
    return "";
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
    // The size before the call: fdatasync covers what was written before
    // it began (conservative if a write raced it; the log never does).
    struct stat st;
    if (::fstat(fd, &st) != 0) return -1;
    const int r = DiskIo::Fdatasync(fd, path);
    if (r == 0) {
      MutexLock lock(&mu_);
      uint64_t& synced = synced_bytes_[std::string(path)];
      synced = std::max(synced, static_cast<uint64_t>(st.st_size));
    }
    return r;
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
  std::map<std::string, uint64_t> synced_bytes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exposure_filter::testing_util

#endif  // EXPOSURE_FILTER_TESTS_PERSIST_FAULTY_DISK_IO_H_
