#include "src/persist/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "src/persist/byte_codec.h"
#include "src/persist/posix_file.h"

namespace exposure_filter {
namespace {

constexpr absl::string_view kWalPrefix = "wal-";
constexpr absl::string_view kWalSuffix = ".log";
constexpr absl::string_view kSnapshotPrefix = "snapshot-";
constexpr absl::string_view kSnapshotSuffix = ".efs";

bool ParseSeq(absl::string_view name, absl::string_view prefix,
              absl::string_view suffix, uint64_t* seq) {
  if (!absl::ConsumePrefix(&name, prefix) ||
      !absl::ConsumeSuffix(&name, suffix) || name.size() != 20) {
    return false;
  }
  return absl::SimpleAtoi(name, seq) && *seq > 0;
}

absl::Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("mkdir", prefix);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const std::string& path,
                                                       DiskIo* io) {
  if (path.empty()) return absl::InvalidArgumentError("data_dir: empty");
  if (absl::Status s = MakeDirs(path); !s.ok()) return s;
  const std::string lock_path = absl::StrCat(path, "/LOCK");
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open", lock_path);
  // flock is released by the kernel when the process dies, even by kill -9,
  // so a crashed server never leaves a stale lock behind.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const bool busy = errno == EWOULDBLOCK;
    absl::Status s = ErrnoStatus("flock", lock_path);
    if (busy) {
      char pid[32] = {0};
      const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
      s = absl::FailedPreconditionError(absl::StrCat(
          "data_dir ", path, " is in use by another exposure-filter-server",
          n > 0 ? absl::StrCat(" (pid ", absl::string_view(pid, n), ")") : "",
          "; each server needs its own --data_dir"));
    }
    ::close(fd);
    return s;
  }
  const std::string pid = absl::StrCat(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    absl::Status s = ErrnoStatus("write", lock_path);
    ::close(fd);
    return s;
  }
  std::unique_ptr<DataDir> dir(
      new DataDir(path, fd, io != nullptr ? io : PosixDiskIo()));
  absl::StatusOr<std::vector<std::string>> names = ListFiles(path);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (absl::EndsWith(name, ".tmp")) {
      const std::string tmp = absl::StrCat(path, "/", name);
      if (::unlink(tmp.c_str()) != 0) return ErrnoStatus("unlink", tmp);
    }
  }
  return dir;
}

DataDir::~DataDir() { ::close(lock_fd_); }

std::string DataDir::WalPath(uint64_t seq) const {
  return absl::StrFormat("%s/%s%020u%s", path_, kWalPrefix, seq, kWalSuffix);
}

std::string DataDir::SnapshotPath(uint64_t seq) const {
  return absl::StrFormat("%s/%s%020u%s", path_, kSnapshotPrefix, seq,
                         kSnapshotSuffix);
}

absl::StatusOr<DataDir::Listing> DataDir::List() const {
  absl::StatusOr<std::vector<std::string>> names = ListFiles(path_);
  if (!names.ok()) return names.status();
  Listing listing;
  for (const std::string& name : *names) {
    uint64_t seq = 0;
    if (ParseSeq(name, kWalPrefix, kWalSuffix, &seq)) {
      listing.wal_segments.push_back(seq);
    } else if (ParseSeq(name, kSnapshotPrefix, kSnapshotSuffix, &seq)) {
      listing.snapshots.push_back(seq);
    }
  }
  std::sort(listing.wal_segments.begin(), listing.wal_segments.end());
  std::sort(listing.snapshots.begin(), listing.snapshots.end());
  return listing;
}

std::string EncodeFileHeader(absl::string_view magic, uint64_t seq) {
  std::string h(magic);
  PutU16(&h, kFileFormatVersion);
  PutU16(&h, kFileHeaderBytes);
  PutU32(&h, 0);
  PutU64(&h, seq);
  PutU64(&h, XXH3_64bits(h.data(), h.size()));
  return h;
}

absl::Status ParseFileHeader(absl::string_view data, absl::string_view magic,
                             uint64_t* seq) {
  if (data.size() < kFileHeaderBytes) {
    return absl::DataLossError(absl::StrCat("file shorter than its ",
                                            kFileHeaderBytes, "-byte header"));
  }
  ByteReader r(data.substr(0, kFileHeaderBytes));
  absl::string_view m;
  uint16_t version = 0, size = 0;
  uint32_t reserved = 0;
  uint64_t sum = 0;
  r.Bytes(8, &m);
  r.U16(&version);
  r.U16(&size);
  r.U32(&reserved);
  r.U64(seq);
  r.U64(&sum);
  if (m != magic) return absl::DataLossError("bad magic");
  if (sum != XXH3_64bits(data.data(), 24)) {
    return absl::DataLossError("header checksum mismatch");
  }
  if (version != kFileFormatVersion || size != kFileHeaderBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("format version ", version, " (this build reads ",
                     kFileFormatVersion, ")"));
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter
