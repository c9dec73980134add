#include "src/server/observability/kafka_ingest_metrics.h"

#include <string>

#include "src/server/observability/metric_families.h"

namespace exposure_filter {

std::vector<prometheus::MetricFamily> KafkaIngestMetrics::Collect() const {
  absl::MutexLock lock(&mu_);
  if (ingest_ == nullptr) return {};
  const KafkaIngestStats s = ingest_->stats();
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  auto counter = [&](const char* name, const char* help, double value) {
    out.push_back(MakeFamily(name, help, MetricType::Counter));
    AddSample(out.back(), {}, value);
  };
  counter("exposure_filter_kafka_messages_total",
          "Kafka messages consumed, good and bad", s.messages);
  counter("exposure_filter_kafka_exposures_total",
          "exposures (user, time, items) recorded from Kafka", s.exposures);
  counter("exposure_filter_kafka_items_total",
          "item ids and keys recorded from Kafka", s.items);
  counter("exposure_filter_kafka_batches_total",
          "Kafka batches recorded and made durable with their offsets",
          s.batches);
  counter("exposure_filter_kafka_record_errors_total",
          "batches the store or the log refused (retried; the partitions "
          "wait)",
          s.record_errors);
  counter("exposure_filter_kafka_group_commit_errors_total",
          "failed offset commits to the consumer group (offsets are durable "
          "here regardless)",
          s.group_commit_errors);
  counter("exposure_filter_kafka_consumer_errors_total",
          "errors librdkafka reported to the consumer (broker down, ...)",
          s.consumer_errors);
  out.push_back(MakeFamily("exposure_filter_kafka_bad_messages_total",
                           "Kafka messages skipped, by reason",
                           MetricType::Counter));
  for (int i = 0; i < kNumBadMessageReasons; ++i) {
    AddSample(
        out.back(),
        {{"reason", BadMessageReasonName(static_cast<BadMessageReason>(i))}},
        s.bad_messages[i]);
  }
  prometheus::MetricFamily lag = MakeFamily(
      "exposure_filter_kafka_consumer_lag_messages",
      "per assigned partition: high watermark - next offset to consume "
      "(absent until both are known)",
      MetricType::Gauge);
  prometheus::MetricFamily position =
      MakeFamily("exposure_filter_kafka_partition_offset",
                 "per assigned partition: next offset to consume, durable here",
                 MetricType::Gauge);
  for (const KafkaPartitionState& p : s.partitions) {
    const MetricLabels labels{{"partition", std::to_string(p.partition)}};
    if (p.lag() >= 0) AddSample(lag, labels, p.lag());
    if (p.position >= 0) AddSample(position, labels, p.position);
  }
  out.push_back(std::move(lag));
  out.push_back(std::move(position));
  return out;
}

}  // namespace exposure_filter
