#include "src/persist/consumer_offsets_record.h"

#include "absl/strings/str_cat.h"
#include "src/persist/byte_codec.h"

namespace exposure_filter {

void ConsumerOffsets::Merge(const ConsumerOffsets& later) {
  if (later.topic != topic) {
    *this = later;
    return;
  }
  for (const auto& [partition, next] : later.next_offset) {
    next_offset[partition] = next;
  }
}

void EncodeConsumerOffsets(const ConsumerOffsets& offsets, std::string* body) {
  PutU16(body, static_cast<uint16_t>(offsets.topic.size()));
  body->append(offsets.topic);
  PutU32(body, static_cast<uint32_t>(offsets.next_offset.size()));
  for (const auto& [partition, next] : offsets.next_offset) {
    PutU32(body, static_cast<uint32_t>(partition));
    PutI64(body, next);
  }
}

absl::Status DecodeConsumerOffsets(absl::string_view body,
                                   ConsumerOffsets* offsets) {
  ByteReader r(body);
  uint16_t topic_bytes = 0;
  absl::string_view topic;
  uint32_t n = 0;
  if (!r.U16(&topic_bytes) || !r.Bytes(topic_bytes, &topic) || !r.U32(&n) ||
      r.remaining() != uint64_t{n} * 12) {
    return absl::DataLossError(absl::StrCat(
        "malformed consumer offsets record (", body.size(), " bytes)"));
  }
  offsets->topic = std::string(topic);
  offsets->next_offset.clear();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t partition = 0;
    int64_t next = 0;
    r.U32(&partition);
    r.I64(&next);
    offsets->next_offset[static_cast<int32_t>(partition)] = next;
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter
