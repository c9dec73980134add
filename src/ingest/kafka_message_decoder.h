// Turning one Kafka message (key = user id, value = exposures) into the
// RecordExposureRequest the store records, and classifying the ones that
// must be skipped. Formats (the --kafka_format flag; docs/kafka.md):
//
//   request   binary exposure.v1.RecordExposureRequest; every exposure's
//             user_id must equal the key
//   exposure  binary exposure.v1.Exposure
//   json      proto3 JSON of exposure.v1.Exposure, e.g.
//             {"user_id":"u1","item_ids":["42"],"item_keys":["a"],
//              "event_time_ms":"1700000000000"}
//             (also lowerCamelCase names and plain JSON numbers)
//
// The key must be the user id: it chose the partition, and a replica only
// consumes its own partitions, so a message whose payload names another
// user would land on a replica that does not serve that user.
#ifndef EXPOSURE_FILTER_SRC_INGEST_KAFKA_MESSAGE_DECODER_H_
#define EXPOSURE_FILTER_SRC_INGEST_KAFKA_MESSAGE_DECODER_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "src/cluster/replica_ownership.h"
#include "src/ingest/kafka_ingest_options.h"

namespace exposure_filter {

// Why a message was skipped (a metric label and a log field).
enum class BadMessageReason {
  kUndecodable,  // not the configured format
  kMissingUser,  // no exposure, or an exposure with no user_id
  kKeyMismatch,  // the key is absent or differs from an exposure's user_id
  kNotOwned,     // the user belongs to another replica's partitions
  kEventTime,    // negative, too far ahead, or older than the retention
  kInvalid,      // any other RecordExposure validation error
  kTraceFull,    // a trace_add this copy cannot hold (--trace_max_users)
};
inline constexpr int kNumBadMessageReasons = 7;
const char* BadMessageReasonName(BadMessageReason reason);

class KafkaMessageDecoder {
 public:
  // `ownership` may be null (every user is ours).
  KafkaMessageDecoder(KafkaMessageFormat format, std::string surface,
                      const ReplicaOwnership* ownership)
      : format_(format), surface_(std::move(surface)), ownership_(ownership) {}

  // Decodes `value` into `out` and checks the key and ownership. Returns
  // the reason to skip the message (with a human-readable `why`), or
  // nullopt when it may go on to validation.
  std::optional<BadMessageReason> Decode(
      absl::string_view key, absl::string_view value,
      exposure::v1::RecordExposureRequest* out, std::string* why) const;

  // A record marked `ef-op: delete_user` (kafka_message_encoder.h):
  // `value` is a binary DeleteUserRequest whose user_id must equal the key
  // and be owned here. Same contract as Decode.
  std::optional<BadMessageReason> DecodeDeleteUser(
      absl::string_view key, absl::string_view value,
      exposure::v1::DeleteUserRequest* out, std::string* why) const;
  // A record marked `ef-op: trace_add` or `trace_remove` (`op`): `value` is
  // a binary TracedUser whose user_id must equal the key and be owned here;
  // a trace_add must carry traced_since_ms > 0. Same contract as Decode.
  std::optional<BadMessageReason> DecodeTraceChange(
      absl::string_view op, absl::string_view key, absl::string_view value,
      exposure::v1::TracedUser* out, std::string* why) const;

 private:
  // What every per-user record (delete_user, trace_*) must satisfy once
  // parsed (`parsed` false: it did not): a user_id, equal to the key, owned.
  std::optional<BadMessageReason> CheckUserRecord(
      absl::string_view op, bool parsed, size_t value_size,
      absl::string_view user_id, absl::string_view key, std::string* why) const;
  // The key-ownership check every kind of record shares.
  std::optional<BadMessageReason> CheckOwned(absl::string_view key,
                                             std::string* why) const;

  const KafkaMessageFormat format_;
  const std::string surface_;
  const ReplicaOwnership* const ownership_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_INGEST_KAFKA_MESSAGE_DECODER_H_
