// Small builders for prometheus::MetricFamily, the scrape-time form of our
// Collectables (grpc_server_metrics.h, exposure_filter_metrics.h,
// process_metrics.h).
#ifndef EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_METRIC_FAMILIES_H_
#define EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_METRIC_FAMILIES_H_

#include <prometheus/metric_family.h>

#include <string>
#include <utility>
#include <vector>

#include "src/server/observability/striped_metrics.h"

namespace exposure_filter {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

prometheus::MetricFamily MakeFamily(std::string name, std::string help,
                                    prometheus::MetricType type);
void AddSample(prometheus::MetricFamily& family, const MetricLabels& labels,
               double value);
// A StripedHistogram whose integer unit is `unit_seconds` (1e-9 for ns),
// exported in seconds.
void AddHistogram(prometheus::MetricFamily& family, const MetricLabels& labels,
                  const StripedHistogram& histogram, double unit);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_METRIC_FAMILIES_H_
