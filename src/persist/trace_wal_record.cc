#include "src/persist/trace_wal_record.h"

#include "absl/strings/str_cat.h"
#include "src/persist/byte_codec.h"

namespace exposure_filter {
namespace {

bool DecodeUser(ByteReader& r, TraceWalRecord* record) {
  return ReadSurfaceUser(r, &record->surface, &record->user_id) &&
         !record->surface.empty();
}

void EncodeStrings(absl::Span<const absl::string_view> strings,
                   std::string* body) {
  PutU32(body, static_cast<uint32_t>(strings.size()));
  for (absl::string_view s : strings) PutString32(body, s);
}

// Each string costs at least its 4-byte length, which bounds `n` by the
// body before anything is allocated.
bool DecodeStrings(ByteReader& r, bool allow_empty,
                   std::vector<absl::string_view>* out) {
  uint32_t n = 0;
  if (!r.U32(&n) || size_t{n} > r.remaining() / 4) return false;
  out->resize(n);
  for (absl::string_view& s : *out) {
    if (!r.String32(&s) || (!allow_empty && s.empty())) return false;
  }
  return true;
}

}  // namespace

bool IsTraceWalRecordType(uint8_t type) {
  return type >= kWalTraceAdd && type <= kWalTraceDrop;
}

void EncodeTraceAdd(absl::Span<const absl::string_view> user_ids,
                    int64_t traced_since_ms, std::string* body) {
  PutI64(body, traced_since_ms);
  EncodeStrings(user_ids, body);
}

void EncodeTraceRemove(absl::Span<const absl::string_view> user_ids,
                       std::string* body) {
  EncodeStrings(user_ids, body);
}

void EncodeTraceRecord(absl::string_view surface, absl::string_view user_id,
                       int64_t event_ms, int64_t expires_at_ms,
                       absl::Span<const uint64_t> item_ids,
                       absl::Span<const absl::string_view> item_keys,
                       std::string* body) {
  PutSurfaceUser(body, surface, user_id);
  PutI64(body, event_ms);
  PutI64(body, expires_at_ms);
  PutU32(body, static_cast<uint32_t>(item_ids.size()));
  for (uint64_t id : item_ids) PutU64(body, id);
  EncodeStrings(item_keys, body);
}

void EncodeTraceDrop(absl::string_view surface, absl::string_view user_id,
                     std::string* body) {
  PutSurfaceUser(body, surface, user_id);
}

absl::Status DecodeTraceWalRecord(uint8_t type, absl::string_view body,
                                  TraceWalRecord* record) {
  ByteReader r(body);
  record->user_ids.clear();
  record->item_ids.clear();
  record->item_keys.clear();
  bool ok = false;
  switch (type) {
    case kWalTraceAdd:
      record->type = kWalTraceAdd;
      ok = r.I64(&record->traced_since_ms) &&
           DecodeStrings(r, /*allow_empty=*/false, &record->user_ids);
      break;
    case kWalTraceRemove:
      record->type = kWalTraceRemove;
      ok = DecodeStrings(r, /*allow_empty=*/false, &record->user_ids);
      break;
    case kWalTraceRecord: {
      record->type = kWalTraceRecord;
      uint32_t n = 0;
      ok = DecodeUser(r, record) && r.I64(&record->event_ms) &&
           record->event_ms > 0 && r.I64(&record->expires_at_ms) && r.U32(&n) &&
           size_t{n} <= r.remaining() / 8;
      if (ok) {
        record->item_ids.resize(n);
        for (uint64_t& id : record->item_ids) r.U64(&id);
        ok = DecodeStrings(r, /*allow_empty=*/false, &record->item_keys);
      }
      break;
    }
    case kWalTraceDrop:
      record->type = kWalTraceDrop;
      ok = DecodeUser(r, record);
      break;
    default:
      return absl::DataLossError(
          absl::StrCat("record type ", type, " is not a trace record"));
  }
  if (!ok || r.remaining() != 0) {
    return absl::DataLossError(
        absl::StrCat("malformed trace record of type ", type));
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter
