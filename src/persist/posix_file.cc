#include "src/persist/posix_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace exposure_filter {
namespace {

constexpr char kErrnoPayload[] = "type.exposure-filter/errno";

absl::Status StatusFor(int err, std::string message) {
  // ENOSPC and friends are conditions an operator fixes, not bugs.
  if (err == ENOSPC || err == EDQUOT) {
    return absl::ResourceExhaustedError(message);
  }
  if (err == ENOENT) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

}  // namespace

absl::Status ErrnoStatus(absl::string_view what, absl::string_view path) {
  const int err = errno;
  absl::Status s =
      StatusFor(err, absl::StrCat(what, " ", path, ": ", std::strerror(err)));
  s.SetPayload(kErrnoPayload, absl::Cord(absl::StrCat(err)));
  return s;
}

int StatusErrno(const absl::Status& status) {
  const absl::optional<absl::Cord> payload = status.GetPayload(kErrnoPayload);
  int err = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &err)) {
    return 0;
  }
  return err;
}

ssize_t DiskIo::Write(int fd, const char* data, size_t size,
                      absl::string_view /*path*/) {
  return ::write(fd, data, size);
}

int DiskIo::Fdatasync(int fd, absl::string_view /*path*/) {
  return ::fdatasync(fd);
}

int DiskIo::FsyncDirectory(int fd, absl::string_view /*path*/) {
  return ::fsync(fd);
}

DiskIo* PosixDiskIo() {
  static DiskIo* const io = new DiskIo();
  return io;
}

absl::Status WriteFully(int fd, absl::string_view data, absl::string_view path,
                        DiskIo* io) {
  while (!data.empty()) {
    const ssize_t n = io->Write(fd, data.data(), data.size(), path);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status SyncFile(int fd, absl::string_view path, DiskIo* io) {
  while (io->Fdatasync(fd, path) != 0) {
    if (errno != EINTR) return ErrnoStatus("fdatasync", path);
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir, DiskIo* io) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open directory", dir);
  absl::Status s;
  if (io->FsyncDirectory(fd, dir) != 0) s = ErrnoStatus("fsync directory", dir);
  ::close(fd);
  return s;
}

absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("opendir", dir);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    const std::string path = absl::StrCat(dir, "/", name);
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      names.push_back(name);
    }
  }
  ::closedir(d);
  return names;
}

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoStatus("stat", path);
    ::close(fd);
    return s;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return MappedFile(nullptr, 0);
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  absl::Status s;
  if (addr == MAP_FAILED) s = ErrnoStatus("mmap", path);
  ::close(fd);
  if (!s.ok()) return s;
  // Recovery reads front to back once.
  ::madvise(addr, size, MADV_SEQUENTIAL);
  return MappedFile(addr, size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : addr_(std::exchange(other.addr_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (addr_ != nullptr) ::munmap(addr_, size_);
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

}  // namespace exposure_filter
