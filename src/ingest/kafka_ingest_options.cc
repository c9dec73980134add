#include "src/ingest/kafka_ingest_options.h"

#include "absl/strings/str_cat.h"

namespace exposure_filter {

absl::Status ParseKafkaMessageFormat(const std::string& name,
                                     KafkaMessageFormat* format) {
  if (name == "request") {
    *format = KafkaMessageFormat::kRequest;
  } else if (name == "exposure") {
    *format = KafkaMessageFormat::kExposure;
  } else if (name == "json") {
    *format = KafkaMessageFormat::kJson;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--kafka_format: \"", name,
                     "\" is not one of request, exposure, json"));
  }
  return absl::OkStatus();
}

const char* KafkaMessageFormatName(KafkaMessageFormat format) {
  switch (format) {
    case KafkaMessageFormat::kRequest:
      return "request";
    case KafkaMessageFormat::kExposure:
      return "exposure";
    case KafkaMessageFormat::kJson:
      return "json";
  }
  return "?";
}

absl::Status KafkaIngestOptions::Validate() const {
  if (!enabled()) return absl::OkStatus();
  if (topic.empty()) {
    return absl::InvalidArgumentError("--kafka_topic: empty");
  }
  if (max_batch_messages < 1) {
    return absl::InvalidArgumentError(
        "--kafka_max_batch_messages: must be >= 1");
  }
  if (max_batch_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--kafka_max_batch_wait: negative");
  }
  // The per-message produce deadline is librdkafka's message.timeout.ms,
  // an int32 of ms: beyond it the producer would refuse to start with
  // librdkafka's wording, not the flag's.
  if (produce_timeout < absl::Milliseconds(1) ||
      produce_timeout > absl::Milliseconds(kMaxProduceTimeoutMs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kafka_produce_timeout: ", absl::FormatDuration(produce_timeout),
        " is outside 1ms to ", kMaxProduceTimeoutMs,
        "ms (librdkafka's message.timeout.ms range, about 24.8 days)"));
  }
  for (const auto& [name, value] : librdkafka_config) {
    if (name == "enable.auto.commit" || name == "enable.auto.offset.store" ||
        name == "group.id" || name == "bootstrap.servers") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kafka_config: ", name,
          " is set by the server (offsets are committed only once durable; "
          "use --kafka_group / --kafka_brokers)"));
    }
    if (name == "enable.partition.eof") {
      return absl::InvalidArgumentError(
          "--kafka_config: enable.partition.eof is set by the server (the "
          "end of a partition tells a copy it has caught up, "
          "docs/scale-out.md)");
    }
  }
  if (start_offset != "earliest" && start_offset != "latest") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kafka_start_offset: \"", start_offset,
                     "\" is not earliest or latest"));
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter
