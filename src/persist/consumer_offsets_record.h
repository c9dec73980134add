// Consumed Kafka offsets, durable together with the exposures
// they carried. Body of the optional write-ahead log record type 68 and the
// value of the snapshot metadata entry "kafka_offsets" (little-endian):
//
//   u16 topic bytes, topic, u32 n, n x (i32 partition, i64 next offset)
//
// "next offset" is Kafka's committed-offset convention: the offset of the
// next message to consume. The record is optional (64..255) so a binary
// without Kafka ingest skips it and still rebuilds every filter; a log
// record lists only the partitions its batch advanced, the snapshot entry
// every partition known at the snapshot's log cut.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_CONSUMER_OFFSETS_RECORD_H_
#define EXPOSURE_FILTER_SRC_PERSIST_CONSUMER_OFFSETS_RECORD_H_

#include <cstdint>
#include <string>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace exposure_filter {

inline constexpr uint8_t kWalConsumerOffsets = 68;
inline constexpr char kConsumerOffsetsMetadataKey[] = "kafka_offsets";

struct ConsumerOffsets {
  std::string topic;
  absl::btree_map<int32_t, int64_t> next_offset;  // partition -> next offset

  // Applies a later record: a different topic (the consumer was pointed at
  // another topic) replaces everything, the same topic advances partitions.
  void Merge(const ConsumerOffsets& later);
  bool operator==(const ConsumerOffsets& o) const {
    return topic == o.topic && next_offset == o.next_offset;
  }
};

void EncodeConsumerOffsets(const ConsumerOffsets& offsets, std::string* body);
// DataLoss on a malformed body (a bug or a foreign file, not a torn write:
// bodies are checksummed).
absl::Status DecodeConsumerOffsets(absl::string_view body,
                                   ConsumerOffsets* offsets);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_CONSUMER_OFFSETS_RECORD_H_
