// Prometheus families of the Kafka consumer (issue 7), scraped from
// KafkaIngest::stats(). Exposure lag (now - event time) of Kafka-ingested
// exposures is in exposure_filter_exposure_lag_seconds with every other
// RecordExposure: the consumer records through that handler.
#ifndef EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_KAFKA_INGEST_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_KAFKA_INGEST_METRICS_H_

#include <prometheus/collectable.h>

#include <vector>

#include "absl/synchronization/mutex.h"
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
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable absl::Mutex mu_;
  const KafkaIngest* ingest_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_KAFKA_INGEST_METRICS_H_
