#include "src/persist/wal_record.h"

#include "absl/strings/str_cat.h"
#include "src/persist/byte_codec.h"

namespace exposure_filter {

void EncodeRecordExposure(absl::string_view surface, absl::string_view user_id,
                          int64_t event_ms, absl::Span<const uint64_t> hashes,
                          std::string* body) {
  body->reserve(body->size() + 1 + surface.size() + 4 + user_id.size() + 12 +
                8 * hashes.size());
  PutSurfaceUser(body, surface, user_id);
  PutI64(body, event_ms);
  PutU32(body, static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) PutU64(body, h);
}

void EncodeDeleteUser(absl::string_view surface, absl::string_view user_id,
                      std::string* body) {
  PutSurfaceUser(body, surface, user_id);
}

absl::Status DecodeWalRecord(uint8_t type, absl::string_view body,
                             WalRecord* record) {
  ByteReader r(body);
  record->item_hashes.clear();
  bool ok = ReadSurfaceUser(r, &record->surface, &record->user_id);
  switch (type) {
    case kWalRecordExposure: {
      record->type = kWalRecordExposure;
      uint32_t n = 0;
      ok = ok && r.I64(&record->event_ms) && record->event_ms > 0 &&
           r.U32(&n) && r.remaining() == size_t{n} * 8;
      if (ok) {
        record->item_hashes.resize(n);
        for (uint64_t& h : record->item_hashes) r.U64(&h);
      }
      break;
    }
    case kWalDeleteUser:
      record->type = kWalDeleteUser;
      ok = ok && r.remaining() == 0;
      break;
    default:
      return absl::DataLossError(absl::StrCat("unknown record type ", type));
  }
  if (!ok) {
    return absl::DataLossError(absl::StrCat("malformed record of type ", type));
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter
