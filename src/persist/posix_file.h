// The few POSIX file operations durability needs, as absl::Status values
// that name the file and the errno text.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_POSIX_FILE_H_
#define EXPOSURE_FILTER_SRC_PERSIST_POSIX_FILE_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace exposure_filter {

// An error status for a failed system call on `path` (errno is read here).
// The errno value travels with it (StatusErrno) so callers can tell a full
// disk from a read-only one or an I/O error without parsing text.
absl::Status ErrnoStatus(absl::string_view what, absl::string_view path);
// The errno of a status made by ErrnoStatus; 0 for any other status.
int StatusErrno(const absl::Status& status);

// The system calls that put bytes on disk, behind a seam so tests can make
// them fail (EIO from fdatasync, ENOSPC part-way through a write) for the
// files of one data directory, without a global switch. The base class
// makes the real calls; PosixDiskIo() is the instance production uses.
// Overrides fail a call by setting errno and returning -1, as the kernel
// does.
class DiskIo {
 public:
  virtual ~DiskIo() = default;
  virtual ssize_t Write(int fd, const char* data, size_t size,
                        absl::string_view path);
  virtual int Fdatasync(int fd, absl::string_view path);
  // fsync(2) of a directory.
  virtual int FsyncDirectory(int fd, absl::string_view path);
};
DiskIo* PosixDiskIo();

// write(2) until all of `data` is written (retries short writes and EINTR).
absl::Status WriteFully(int fd, absl::string_view data, absl::string_view path,
                        DiskIo* io = PosixDiskIo());
// fdatasync(2); fsync(2) of a directory makes renames and creations in it
// durable.
absl::Status SyncFile(int fd, absl::string_view path,
                      DiskIo* io = PosixDiskIo());
absl::Status SyncDirectory(const std::string& dir, DiskIo* io = PosixDiskIo());

// Names of the regular files in `dir` (no "." or "..").
absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir);

// A whole file mapped read-only; empty files map to an empty view.
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  absl::string_view data() const {
    return absl::string_view(static_cast<const char*>(addr_), size_);
  }

 private:
  MappedFile(void* addr, size_t size) : addr_(addr), size_(size) {}
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_POSIX_FILE_H_
