// The User records of a snapshot: one user's filter on one surface, as the
// FilterParts the filter takes apart into (src/filter/filter_parts.h).
//
// Version 2 (record type kSnapshotUserParts = 18), written since filter
// format 2; little-endian, fields in this order:
//   u16 surface id | string32 user id | u8 S, live slices (1..64)
//   S x slice: i64 index | i64 min_event_ms | i64 max_event_ms
//              | u8 G, legacy Bloom segments (0..8)
//     G x segment: u32 blocks (1..2^26) | u8 k (1..16) | u64 count
//                  | u64 capacity (>= 1) | 64 * blocks bytes of bits
//              | u8 R, runs (0..255)
//     R x run:     u32 capacity | u8 open (0 or 1) | u32 L
//                  | L bytes: FingerprintRun::Serialize() (b, Rice k, n,
//                    U - 1, payload; validated by FingerprintRun::Parse)
//   (a slice holds G + R >= 1 parts).
// Version 1 (record type kSnapshotUser = 17), what the previous release
// wrote: the same without R and runs, and G in 1..8 (so a version-2 body
// of Bloom slices is a version-1 body with a 0 after each slice's
// segments; format 2's interim development builds wrote this same layout
// as type 18).
// It is still read (a data directory written by the previous release loads with
// every user kept: its slices become SlicePart::bloom_segments) but never
// written.
//
// A release that knows only version 1 stops at a version-2 record with
// "unknown record type 18 (written by a newer version?)": record types
// below 64 are required (record_frame.h), so a downgrade is refused, never
// half-loaded.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_SNAPSHOT_USER_RECORD_H_
#define EXPOSURE_FILTER_SRC_PERSIST_SNAPSHOT_USER_RECORD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/filter/filter_parts.h"
#include "src/filter/filter_policy.h"
#include "src/filter/user_filter.h"

namespace exposure_filter {

inline constexpr uint8_t kSnapshotUserRecordV1 = 17;
inline constexpr uint8_t kSnapshotUserRecordV2 = 18;

// Appends the version-2 body of the parts' slices that are live at
// `now_ms` (policy.SliceLive); false, and nothing appended, if none is.
bool EncodeUserParts(uint16_t surface_id, absl::string_view user_id,
                     const FilterParts& parts, const FilterPolicy& policy,
                     int64_t now_ms, std::string* body);
// The same for a filter (taken apart with ToParts).
bool EncodeUserRecord(uint16_t surface_id, absl::string_view user_id,
                      const UserFilter& filter, const FilterPolicy& policy,
                      int64_t now_ms, std::string* body);

struct DecodedUserRecord {
  uint16_t surface_id = 0;
  absl::string_view user_id;  // points into the body
  FilterParts parts;
};
// Decodes a body of record type `type` (kSnapshotUserRecordV1 or V2).
// InvalidArgument naming the first malformed field; never reads out of
// bounds.
absl::StatusOr<DecodedUserRecord> DecodeUserRecord(uint8_t type,
                                                   absl::string_view body);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_SNAPSHOT_USER_RECORD_H_
