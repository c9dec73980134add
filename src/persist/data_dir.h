// DataDir: the files of one server's durable state, and the lock that keeps
// a second process out of them.
//
//   LOCK                          flock(2)ed while a server owns the directory
//   wal-<seq>.log                 write-ahead log segments, seq = 1, 2, ...
//   snapshot-<seq>.efs            a snapshot holding every change logged in
//                                 wal segments <= seq
//   *.tmp                         a snapshot being written; removed at open
//
// Sequence numbers are zero-padded to 20 digits so names sort by number.
// Any other file is left alone (and ignored).
#ifndef EXPOSURE_FILTER_SRC_PERSIST_DATA_DIR_H_
#define EXPOSURE_FILTER_SRC_PERSIST_DATA_DIR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/persist/posix_file.h"

namespace exposure_filter {

class DataDir {
 public:
  // Creates the directory if needed and takes its lock; FailedPrecondition
  // naming the holder's pid when another process has it. Removes leftover
  // *.tmp files of an interrupted snapshot. The log and snapshots write
  // through `io` (null: the real system calls; tests inject faults).
  static absl::StatusOr<std::unique_ptr<DataDir>> Open(const std::string& path,
                                                       DiskIo* io = nullptr);
  ~DataDir();  // releases the lock
  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;

  const std::string& path() const { return path_; }
  DiskIo* io() const { return io_; }
  std::string WalPath(uint64_t seq) const;
  std::string SnapshotPath(uint64_t seq) const;

  struct Listing {
    std::vector<uint64_t> wal_segments;  // ascending
    std::vector<uint64_t> snapshots;     // ascending
  };
  absl::StatusOr<Listing> List() const;

 private:
  DataDir(std::string path, int lock_fd, DiskIo* io)
      : path_(std::move(path)), lock_fd_(lock_fd), io_(io) {}
  const std::string path_;
  const int lock_fd_;
  DiskIo* const io_;
};

// The 32-byte header that opens a log segment and a snapshot:
//   0 8 magic, 8 u16 format version, 10 u16 header size (32), 12 u32 zero,
//   16 u64 sequence number, 24 u64 XXH3-64 of bytes 0..23.
inline constexpr size_t kFileHeaderBytes = 32;
inline constexpr uint16_t kFileFormatVersion = 1;
inline constexpr absl::string_view kWalMagic{"EXPFWAL\0", 8};
inline constexpr absl::string_view kSnapshotMagic{"EXPFSNAP", 8};

std::string EncodeFileHeader(absl::string_view magic, uint64_t seq);
// Checks magic, version, size and checksum; *seq is the header's sequence.
absl::Status ParseFileHeader(absl::string_view data, absl::string_view magic,
                             uint64_t* seq);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_DATA_DIR_H_
