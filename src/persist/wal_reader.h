// Reading one write-ahead log segment back, for recovery.
//
// A segment is replayed record by record until its end. What stops it early:
//   torn tail  the file ends inside the last record (the process or the
//              machine died mid-write). Expected; only allowed in the newest
//              segment. The bytes are counted and the good prefix is kept.
//   corrupt    a record fails its checks with more data after it, a bad or
//              foreign header, or a record type this build cannot skip.
//              Replay stops at the last good record.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_WAL_READER_H_
#define EXPOSURE_FILTER_SRC_PERSIST_WAL_READER_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "src/persist/wal_record.h"

namespace exposure_filter {

struct WalSegmentReplay {
  uint64_t records = 0;           // delivered to the callback
  uint64_t skipped_optional = 0;  // unknown optional records skipped
  uint64_t good_bytes = 0;        // length of the valid prefix of the file
  uint64_t torn_bytes = 0;        // bytes of a torn tail (0 if none)
  // Not OK when replay stopped at corruption: DataLoss naming the offset.
  absl::Status corruption;
};

// Replays the segment file `data` whose name says it is segment `seq`;
// `newest` marks the last segment, the only one that may end torn.
WalSegmentReplay ReplayWalSegment(
    absl::string_view data, uint64_t seq, bool newest,
    absl::FunctionRef<void(const WalRecord&)> apply);
// Also hands optional records (types >= 64) to `apply_optional`, which
// returns false for types it does not know (those are skipped and counted).
WalSegmentReplay ReplayWalSegment(
    absl::string_view data, uint64_t seq, bool newest,
    absl::FunctionRef<void(const WalRecord&)> apply,
    absl::FunctionRef<bool(uint8_t type, absl::string_view body)>
        apply_optional);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_WAL_READER_H_
