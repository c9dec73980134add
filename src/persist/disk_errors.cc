#include "src/persist/disk_errors.h"

#include <cerrno>

#include "src/persist/posix_file.h"

namespace exposure_filter {

DiskErrorKind ClassifyDiskError(const absl::Status& status) {
  switch (StatusErrno(status)) {
    case ENOSPC:
    case EDQUOT:
      return DiskErrorKind::kNoSpace;
    case EROFS:
    case EACCES:
    case EPERM:
      return DiskErrorKind::kReadOnly;
    case EIO:
      return DiskErrorKind::kIo;
    default:
      return DiskErrorKind::kOther;
  }
}

absl::string_view DiskOpName(DiskOp op) {
  switch (op) {
    case DiskOp::kWalWrite:
      return "wal_write";
    case DiskOp::kWalSync:
      return "wal_sync";
    case DiskOp::kWalCreate:
      return "wal_create";
    case DiskOp::kSnapshot:
      return "snapshot";
  }
  return "?";
}

absl::string_view DiskErrorKindName(DiskErrorKind kind) {
  switch (kind) {
    case DiskErrorKind::kNoSpace:
      return "no_space";
    case DiskErrorKind::kReadOnly:
      return "read_only";
    case DiskErrorKind::kIo:
      return "io";
    case DiskErrorKind::kOther:
      return "other";
  }
  return "?";
}

}  // namespace exposure_filter
