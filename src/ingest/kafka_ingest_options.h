// KafkaIngestOptions: the Kafka consumer's configuration, filled
// from the --kafka_* flags (docs/kafka.md).
#ifndef EXPOSURE_FILTER_SRC_INGEST_KAFKA_INGEST_OPTIONS_H_
#define EXPOSURE_FILTER_SRC_INGEST_KAFKA_INGEST_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace exposure_filter {

// How a message value is encoded; the format flag names it, nothing in the
// bytes does (protobuf has no self-description, and guessing between two
// messages that share field numbers would misread data silently).
enum class KafkaMessageFormat {
  kRequest,   // protobuf exposure.v1.RecordExposureRequest (binary)
  kExposure,  // protobuf exposure.v1.Exposure (binary), surface from flag
  kJson,      // proto3 JSON of exposure.v1.Exposure, surface from flag
};

// "request" | "exposure" | "json".
absl::Status ParseKafkaMessageFormat(const std::string& name,
                                     KafkaMessageFormat* format);
const char* KafkaMessageFormatName(KafkaMessageFormat format);

// librdkafka's largest message.timeout.ms (an int32 of milliseconds).
inline constexpr int64_t kMaxProduceTimeoutMs = 2147483647;

struct KafkaIngestOptions {
  // Comma-separated bootstrap servers; empty turns the consumer off.
  std::string brokers;
  std::string topic = "exposures";
  // Consumer group: offsets are committed there (after they are durable
  // here) for lag tools, and used as the start when this server has none.
  std::string group = "exposure-filter";
  KafkaMessageFormat format = KafkaMessageFormat::kRequest;
  // Surface of kExposure / kJson messages ("" = the default surface).
  std::string surface;
  // A batch is recorded when it holds this many messages or its first
  // message waited this long, whichever comes first.
  size_t max_batch_messages = 5000;
  absl::Duration max_batch_wait = absl::Milliseconds(50);
  // Where a partition with no stored offset (here or in the group) starts:
  // "earliest" replays the topic's retention (nothing recorded is missed),
  // "latest" only new messages.
  std::string start_offset = "earliest";
  // Replicated writes (exposure_log_producer.h): how long a
  // RecordExposure/DeleteUser RPC's messages may wait for Kafka's
  // acknowledgement (message.timeout.ms, retries included) before the call
  // answers UNAVAILABLE naming them. Keep it below the callers' deadlines,
  // so they get the precise answer rather than DEADLINE_EXCEEDED.
  // The per-message produce deadline: 1 ms to kMaxProduceTimeoutMs.
  absl::Duration produce_timeout = absl::Seconds(5);
  // Further librdkafka properties (security.protocol, sasl.*, ssl.*,
  // fetch.wait.max.ms, ...), applied last; they may not override the ones
  // the at-least-once scheme depends on (enable.auto.commit,
  // enable.auto.offset.store).
  std::vector<std::pair<std::string, std::string>> librdkafka_config;

  bool enabled() const { return !brokers.empty(); }
  absl::Status Validate() const;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_INGEST_KAFKA_INGEST_OPTIONS_H_
