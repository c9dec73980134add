// The records of the write-ahead log (bodies of RecordFrames, see
// record_frame.h; all integers little-endian):
//
//   type 1 RecordExposure: u8 surface bytes, surface, u32 user bytes, user,
//          i64 event_ms (resolved, never 0), u32 n, n x u64 item hash
//   type 2 DeleteUser:     u8 surface bytes, surface, u32 user bytes, user
//
// Items are logged as their XXH3 hashes (item_hash.h), which is all a filter
// keeps: 8 bytes an item whatever the key length, and replay skips hashing.
// Surfaces are logged by name because surface ids are assigned in creation
// order and differ between runs. Later features add types (1..63 if older
// binaries must refuse the log, 64..255 if they may skip the record).
#ifndef EXPOSURE_FILTER_SRC_PERSIST_WAL_RECORD_H_
#define EXPOSURE_FILTER_SRC_PERSIST_WAL_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace exposure_filter {

enum WalRecordType : uint8_t {
  kWalRecordExposure = 1,
  kWalDeleteUser = 2,
};

struct WalRecord {
  WalRecordType type = kWalRecordExposure;
  absl::string_view surface;
  absl::string_view user_id;
  int64_t event_ms = 0;               // RecordExposure only
  std::vector<uint64_t> item_hashes;  // RecordExposure only
};

// Body encoders (the frame is added by the caller).
void EncodeRecordExposure(absl::string_view surface, absl::string_view user_id,
                          int64_t event_ms, absl::Span<const uint64_t> hashes,
                          std::string* body);
void EncodeDeleteUser(absl::string_view surface, absl::string_view user_id,
                      std::string* body);

// Decodes a body of a known type; DataLoss on a malformed body. The views
// point into `body`.
absl::Status DecodeWalRecord(uint8_t type, absl::string_view body,
                             WalRecord* record);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_WAL_RECORD_H_
