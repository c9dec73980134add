#include "src/server/observability/kafka_ingest_metrics.h"

#include <limits>
#include <string>

#include "src/server/observability/metric_families.h"

namespace exposure_filter {

void KafkaIngestMetrics::CollectProducer(
    std::vector<prometheus::MetricFamily>* out) const {
  using prometheus::MetricType;
  const ExposureLogProducerStats s = producer_->stats();
  auto one = [&](const char* name, const char* help, MetricType type,
                 double value) {
    out->push_back(MakeFamily(name, help, type));
    AddSample(out->back(), {}, value);
  };
  one("exposure_filter_kafka_produced_messages_total",
      "replicated writes: messages Kafka acknowledged (acks=all)",
      MetricType::Counter, s.messages_acked);
  one("exposure_filter_kafka_produce_failed_messages_total",
      "replicated writes: messages Kafka did not acknowledge (their RPC "
      "answered UNAVAILABLE naming them)",
      MetricType::Counter, s.messages_failed);
  one("exposure_filter_kafka_produce_in_flight_messages",
      "replicated writes: messages waiting for their delivery report",
      MetricType::Gauge, s.messages_in_flight);
  one("exposure_filter_kafka_producer_rebuilds_total",
      "replicated writes: producer handles rebuilt after a fatal error "
      "(idempotence state lost); writes answered UNAVAILABLE and health said "
      "NOT_SERVING during each rebuild",
      MetricType::Counter, s.rebuilds);
  one("exposure_filter_kafka_producer_writable",
      "replicated writes: 1 while the producer takes writes, 0 while it is "
      "rebuilt after a fatal error (or closed)",
      MetricType::Gauge, s.writable ? 1 : 0);
  prometheus::MetricFamily latency =
      MakeFamily("exposure_filter_kafka_produce_seconds",
                 "replicated writes: a call's first enqueue to its last "
                 "delivery report",
                 MetricType::Histogram);
  prometheus::ClientMetric m;
  for (size_t i = 0; i < s.latency_buckets.size(); ++i) {
    m.histogram.bucket.push_back(
        {s.latency_buckets[i],
         i < kProduceLatencyBoundsMs.size()
             ? static_cast<double>(kProduceLatencyBoundsMs[i]) / 1000.0
             : std::numeric_limits<double>::infinity()});
  }
  m.histogram.sample_count = s.latency_buckets.back();
  m.histogram.sample_sum = s.latency_sum_ms / 1000.0;
  latency.metric.push_back(std::move(m));
  out->push_back(std::move(latency));
}

std::vector<prometheus::MetricFamily> KafkaIngestMetrics::Collect() const {
  absl::MutexLock lock(&mu_);
  std::vector<prometheus::MetricFamily> out;
  if (producer_ != nullptr) CollectProducer(&out);
  if (ingest_ == nullptr) return out;
  const KafkaIngestStats s = ingest_->stats();
  using prometheus::MetricType;
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
  counter("exposure_filter_kafka_deletes_total",
          "delete_user records applied from Kafka (replicated DeleteUser)",
          s.deletes);
  counter("exposure_filter_kafka_trace_changes_total",
          "trace_add / trace_remove records applied from Kafka (replicated "
          "AddTracedUsers / RemoveTracedUsers)",
          s.trace_changes);
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
