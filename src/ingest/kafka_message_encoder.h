// KafkaMessageEncoder: the inverse of KafkaMessageDecoder, for the replicated
// write path. A RecordExposure or DeleteUser RPC to a replica
// with --replication_factor >= 2 is turned into messages of the exposure
// topic, in the topic's own --kafka_format, keyed by user id, so that every
// owner of the user applies them from the log exactly as it applies a
// logger's messages:
//
//   request   one message per user: a RecordExposureRequest with the call's
//             surface and that user's exposures, in call order
//   exposure  one message per exposure (binary exposure.v1.Exposure)
//   json      one message per exposure (proto3 JSON, .proto field names)
//
// `exposure` and `json` carry no surface: the consumers apply them to
// --kafka_surface, so a call naming another surface cannot be logged and is
// refused (InvalidArgument naming `surface`).
//
// A DeleteUser is a record in the same topic, keyed by the user id, with the
// header `ef-op: delete_user` and a binary exposure.v1.DeleteUserRequest as
// value, whatever the format: it lands in the user's partition, so every
// owner applies it in order with that user's exposures (an exposure logged
// before the delete is gone after it, one logged after it stays). Messages
// without the header are exposures, as before (loggers need not change).
//
// AddTracedUsers / RemoveTracedUsers are records of the same kind, one per
// user id, with the headers `ef-op: trace_add` / `ef-op: trace_remove` and a
// binary exposure.v1.TracedUser {user_id, traced_since_ms} as value: ordered
// with the user's exposures, so both owners trace exactly the exposures
// logged after the trace_add. traced_since_ms is the receiving replica's
// clock when it produced the record, carried in the value (not each owner's
// consume time, nor the Kafka timestamp, whose meaning is the topic's
// message.timestamp.type): both copies then report the same traced_since,
// stamped by the clock that also stamps the call's exposures (event time 0).
#ifndef EXPOSURE_FILTER_SRC_INGEST_KAFKA_MESSAGE_ENCODER_H_
#define EXPOSURE_FILTER_SRC_INGEST_KAFKA_MESSAGE_ENCODER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "src/ingest/kafka_ingest_options.h"

namespace exposure_filter {

// The header that marks a record that is not exposures, and its values.
inline constexpr char kLogOpHeader[] = "ef-op";
inline constexpr char kLogOpDeleteUser[] = "delete_user";
inline constexpr char kLogOpTraceAdd[] = "trace_add";
inline constexpr char kLogOpTraceRemove[] = "trace_remove";

// One message for the exposure topic.
struct LogMessage {
  std::string key;    // the user id: it chooses the partition
  std::string value;  // in the topic's format (above)
  // The ef-op header's value (one of the kLogOp* above); empty for
  // exposures, which carry no header.
  absl::string_view op;
  // Which part of the call it carries, for the error naming what was not
  // written: "exposures[0,3] (user \"u1\")" or "user \"u1\"".
  std::string what;
  // Exposures and items the message carries (0 for a delete).
  size_t items = 0;
};

class KafkaMessageEncoder {
 public:
  KafkaMessageEncoder(KafkaMessageFormat format, std::string surface)
      : format_(format), surface_(std::move(surface)) {}

  // Appends the messages of `req` to `out`. `indices[i]` is the position of
  // req.exposures(i) in the caller's request (the RPC may have left some
  // out), used in LogMessage::what. InvalidArgument naming `surface` when
  // the format carries no surface and req.surface() is not --kafka_surface.
  absl::Status EncodeExposures(const exposure::v1::RecordExposureRequest& req,
                               const std::vector<int>& indices,
                               std::vector<LogMessage>* out) const;
  LogMessage EncodeDeleteUser(const exposure::v1::DeleteUserRequest& req) const;
  // A trace_add (`traced`) or trace_remove record of one user.
  LogMessage EncodeTraceChange(absl::string_view user_id, bool traced,
                               int64_t traced_since_ms) const;

  KafkaMessageFormat format() const { return format_; }

 private:
  const KafkaMessageFormat format_;
  const std::string surface_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_INGEST_KAFKA_MESSAGE_ENCODER_H_
