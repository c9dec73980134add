// DiskErrorCounts: failed disk operations of the durability layer, by what
// was being done and why it failed, for metrics and alerts (when the data
// directory fills up, turns read-only, or fsync fails).
//
// The kinds are the few an operator acts on differently: free space
// (ENOSPC, EDQUOT), remount or fix permissions (EROFS, EACCES, EPERM),
// check the device (EIO), anything else.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_DISK_ERRORS_H_
#define EXPOSURE_FILTER_SRC_PERSIST_DISK_ERRORS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace exposure_filter {

enum class DiskOp : uint8_t {
  kWalWrite,   // write(2) of a group commit
  kWalSync,    // fdatasync(2) of the log (always, interval, rotation)
  kWalCreate,  // creating the next log segment
  kSnapshot,   // writing, syncing or renaming a snapshot
};
inline constexpr size_t kNumDiskOps = 4;

enum class DiskErrorKind : uint8_t { kNoSpace, kReadOnly, kIo, kOther };
inline constexpr size_t kNumDiskErrorKinds = 4;

// From the errno an ErrnoStatus carries (kOther without one).
DiskErrorKind ClassifyDiskError(const absl::Status& status);
// Metric label values: "wal_write", ...; "no_space", "read_only", "io",
// "other".
absl::string_view DiskOpName(DiskOp op);
absl::string_view DiskErrorKindName(DiskErrorKind kind);

class DiskErrorCounts {
 public:
  void Add(DiskOp op, const absl::Status& status) {
    counts_[Index(op, ClassifyDiskError(status))].fetch_add(
        1, std::memory_order_relaxed);
  }
  uint64_t Get(DiskOp op, DiskErrorKind kind) const {
    return counts_[Index(op, kind)].load(std::memory_order_relaxed);
  }

 private:
  static size_t Index(DiskOp op, DiskErrorKind kind) {
    return static_cast<size_t>(op) * kNumDiskErrorKinds +
           static_cast<size_t>(kind);
  }
  std::array<std::atomic<uint64_t>, kNumDiskOps * kNumDiskErrorKinds> counts_{};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_DISK_ERRORS_H_
