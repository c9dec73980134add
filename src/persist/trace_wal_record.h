// Write-ahead log records of traced users, bodies of RecordFrames
// like wal_record.h (all integers little-endian):
//
//   type 64 TraceAdd:    i64 traced_since_ms, u32 n, n x (u32 bytes, user)
//   type 65 TraceRemove: u32 n, n x (u32 bytes, user)
//   type 66 TraceRecord: u8 surface bytes, surface, u32 user bytes, user,
//                        i64 event_ms, i64 expires_at_ms,
//                        u32 n, n x u64 item id, u32 m, m x (u32 bytes, key)
//   type 67 TraceDrop:   u8 surface bytes, surface, u32 user bytes, user
//
// Optional types (64..255) on purpose: the trace is debugging data beside
// the filters, so a binary that does not know these records may skip them
// and still rebuild every filter exactly; it just starts with no traced
// users. (Required types would make such a binary refuse the whole log.)
// Items are logged as given (ids and keys, not hashes): Explain reports
// them by id/key and a hash cannot be turned back into a key.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_TRACE_WAL_RECORD_H_
#define EXPOSURE_FILTER_SRC_PERSIST_TRACE_WAL_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace exposure_filter {

enum TraceWalRecordType : uint8_t {
  kWalTraceAdd = 64,
  kWalTraceRemove = 65,
  kWalTraceRecord = 66,
  kWalTraceDrop = 67,
};

struct TraceWalRecord {
  TraceWalRecordType type = kWalTraceAdd;
  std::vector<absl::string_view> user_ids;   // Add, Remove
  int64_t traced_since_ms = 0;               // Add
  absl::string_view surface;                 // Record, Drop
  absl::string_view user_id;                 // Record, Drop
  int64_t event_ms = 0;                      // Record
  int64_t expires_at_ms = 0;                 // Record
  std::vector<uint64_t> item_ids;            // Record
  std::vector<absl::string_view> item_keys;  // Record
};

bool IsTraceWalRecordType(uint8_t type);

void EncodeTraceAdd(absl::Span<const absl::string_view> user_ids,
                    int64_t traced_since_ms, std::string* body);
void EncodeTraceRemove(absl::Span<const absl::string_view> user_ids,
                       std::string* body);
void EncodeTraceRecord(absl::string_view surface, absl::string_view user_id,
                       int64_t event_ms, int64_t expires_at_ms,
                       absl::Span<const uint64_t> item_ids,
                       absl::Span<const absl::string_view> item_keys,
                       std::string* body);
void EncodeTraceDrop(absl::string_view surface, absl::string_view user_id,
                     std::string* body);

// Decodes a body of one of the types above; DataLoss if it is malformed
// (or the type is not a trace type). Views point into `body`.
absl::Status DecodeTraceWalRecord(uint8_t type, absl::string_view body,
                                  TraceWalRecord* record);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_TRACE_WAL_RECORD_H_
