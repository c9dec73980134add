// Prometheus families of the Kafka consumer, scraped from
// KafkaIngest::stats(). Exposure lag (now - event time) of Kafka-ingested
// exposures is in exposure_filter_exposure_lag_seconds with every other
// RecordExposure: the consumer records through that handler. With R >= 2
// also the producer of the replicated writes (exposure_log_producer.h).
#ifndef EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_KAFKA_INGEST_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_KAFKA_INGEST_METRICS_H_

#include <prometheus/collectable.h>

#include <vector>

#include "absl/synchronization/mutex.h"
#include "src/ingest/exposure_log_producer.h"
#include "src/ingest/kafka_ingest.h"

namespace exposure_filter {

class KafkaIngestMetrics final : public prometheus::Collectable {
 public:
  // The admin port starts before the consumer; until Attach (and after
  // Detach) there is nothing to report.
  void Attach(const KafkaIngest* ingest) {
    absl::MutexLock lock(&mu_);
    ingest_ = ingest;
  }
  // The replicated write path's producer (R >= 2 only).
  void AttachProducer(const ExposureLogProducer* producer) {
    absl::MutexLock lock(&mu_);
    producer_ = producer;
  }
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  void CollectProducer(std::vector<prometheus::MetricFamily>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  const KafkaIngest* ingest_ ABSL_GUARDED_BY(mu_) = nullptr;
  const ExposureLogProducer* producer_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_KAFKA_INGEST_METRICS_H_
