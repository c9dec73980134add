// Setting one librdkafka configuration property, its refusal as a Status
// naming the property and the value: shared by the consumer
// (kafka_ingest.cc) and the producer (exposure_log_producer.cc).
#ifndef EXPOSURE_FILTER_SRC_INGEST_KAFKA_CONF_H_
#define EXPOSURE_FILTER_SRC_INGEST_KAFKA_CONF_H_

#include <librdkafka/rdkafkacpp.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace exposure_filter {

// `what` starts the error ("kafka config", "kafka producer config").
inline absl::Status SetKafkaConf(RdKafka::Conf* conf, absl::string_view what,
                                 const std::string& name,
                                 const std::string& value) {
  std::string err;
  if (conf->set(name, value, err) != RdKafka::Conf::CONF_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", name, "=", value, ": ", err));
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_INGEST_KAFKA_CONF_H_
