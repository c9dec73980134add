// The few POSIX file operations durability needs, as absl::Status values
// that name the file and the errno text.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_POSIX_FILE_H_
#define EXPOSURE_FILTER_SRC_PERSIST_POSIX_FILE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace exposure_filter {

// An error status for a failed system call on `path` (errno is read here).
absl::Status ErrnoStatus(absl::string_view what, absl::string_view path);

// write(2) until all of `data` is written (retries short writes and EINTR).
absl::Status WriteFully(int fd, absl::string_view data, absl::string_view path);
// fdatasync(2); fsync(2) of a directory makes renames and creations in it
// durable.
absl::Status SyncFile(int fd, absl::string_view path);
absl::Status SyncDirectory(const std::string& dir);

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
