#include "src/server/observability/metric_families.h"

#include <limits>

namespace exposure_filter {
namespace {

prometheus::ClientMetric WithLabels(const MetricLabels& labels) {
  prometheus::ClientMetric m;
  for (const auto& [name, value] : labels) m.label.push_back({name, value});
  return m;
}

}  // namespace

prometheus::MetricFamily MakeFamily(std::string name, std::string help,
                                    prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void AddSample(prometheus::MetricFamily& family, const MetricLabels& labels,
               double value) {
  prometheus::ClientMetric m = WithLabels(labels);
  switch (family.type) {
    case prometheus::MetricType::Counter:
      m.counter.value = value;
      break;
    case prometheus::MetricType::Gauge:
      m.gauge.value = value;
      break;
    default:
      m.untyped.value = value;
      break;
  }
  family.metric.push_back(std::move(m));
}

void AddHistogram(prometheus::MetricFamily& family, const MetricLabels& labels,
                  const StripedHistogram& histogram, double unit) {
  prometheus::ClientMetric m = WithLabels(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < histogram.num_buckets(); ++i) {
    cumulative += histogram.BucketCount(i);
    const double bound = i < histogram.bounds().size()
                             ? static_cast<double>(histogram.bounds()[i]) * unit
                             : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back({cumulative, bound});
  }
  // The count is the +Inf bucket, so a scrape racing Observe stays
  // self-consistent (count == last bucket).
  m.histogram.sample_count = cumulative;
  m.histogram.sample_sum = static_cast<double>(histogram.Sum()) * unit;
  family.metric.push_back(std::move(m));
}

}  // namespace exposure_filter
