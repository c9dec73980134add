// ExposureFilterMetrics: the service's own Prometheus series (prefix
// exposure_filter_), gathered at scrape time from the store, the handlers'
// counters and the sweeper's last report; nothing here runs per request.
// Labels are at most `surface` (bounded by --max_surfaces) and bucket
// bounds; never a user or item id.
#ifndef EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_METRICS_H_

#include <prometheus/collectable.h>

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {

class ExposureFilterMetrics final : public prometheus::Collectable {
 public:
  // All must outlive this object.
  ExposureFilterMetrics(const SurfaceRegistry* surfaces,
                        const ShardedFilterStore* store,
                        const ExposureFilterHandlers* handlers);

  // The sweeper reports each pass here.
  void RecordSweep(const SweepReport& report, absl::Time finished,
                   absl::Duration took);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const SurfaceRegistry* const surfaces_;
  const ShardedFilterStore* const store_;
  const ExposureFilterHandlers* const handlers_;
  mutable absl::Mutex mu_;
  SweepReport last_sweep_ ABSL_GUARDED_BY(mu_);
  absl::Time last_sweep_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration last_sweep_took_ ABSL_GUARDED_BY(mu_);
  uint64_t users_aged_out_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_METRICS_H_
