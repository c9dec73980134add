#include "src/server/exposure_filter_metrics.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/server/observability/metric_families.h"

namespace exposure_filter {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

}  // namespace

ExposureFilterMetrics::ExposureFilterMetrics(
    const SurfaceRegistry* surfaces, const ShardedFilterStore* store,
    const ExposureFilterHandlers* handlers)
    : surfaces_(surfaces), store_(store), handlers_(handlers) {}

void ExposureFilterMetrics::RecordSweep(const SweepReport& report,
                                        absl::Time finished,
                                        absl::Duration took) {
  absl::MutexLock lock(&mu_);
  last_sweep_ = report;
  last_sweep_at_ = finished;
  last_sweep_took_ = took;
  users_aged_out_ += report.users_removed;
}

std::vector<MetricFamily> ExposureFilterMetrics::Collect() const {
  std::vector<MetricFamily> out;
  auto family = [&](const char* name, const char* help, MetricType type) {
    out.push_back(MakeFamily(name, help, type));
    return out.size() - 1;
  };
  auto scalar = [&](const char* name, const char* help, MetricType type,
                    double value) {
    AddSample(out[family(name, help, type)], {}, value);
  };

  // --- Store: users and bytes per surface, the ceiling ------------------
  const std::vector<const Surface*> surfaces = surfaces_->All();
  const StoreUsage usage = store_->Usage(surfaces.size());
  const size_t users =
      family("exposure_filter_store_users",
             "Users holding a filter, by surface.", MetricType::Gauge);
  const size_t bytes =
      family("exposure_filter_store_bytes",
             "Memory held by user filters (bits, bookkeeping, map slots), by "
             "surface; their sum is what --memory_limit_bytes caps.",
             MetricType::Gauge);
  const size_t target =
      family("exposure_filter_fp_rate_target",
             "Configured false-positive rate per lookup, by surface.",
             MetricType::Gauge);
  for (const Surface* s : surfaces) {
    const MetricLabels labels = {{"surface", s->name}};
    AddSample(out[users], labels,
              static_cast<double>(usage.surfaces[s->id].users));
    AddSample(out[bytes], labels,
              static_cast<double>(usage.surfaces[s->id].bytes));
    AddSample(out[target], labels, s->policy.fp_rate());
  }
  uint64_t max_shard = 0;
  for (const ShardUsage& su : usage.shards) {
    max_shard = std::max(max_shard, su.bytes);
  }
  scalar("exposure_filter_store_shard_bytes_max",
         "Bytes held by the fullest shard (compare with "
         "sum(exposure_filter_store_bytes) / exposure_filter_store_shards).",
         MetricType::Gauge, static_cast<double>(max_shard));
  scalar("exposure_filter_store_table_slack_bytes",
         "Empty slots of the shards' hash tables: not any user's, but "
         "counted against the memory ceiling with exposure_filter_store_bytes.",
         MetricType::Gauge, static_cast<double>(usage.table_slack_bytes));
  scalar("exposure_filter_store_shards", "Store shards (--shards).",
         MetricType::Gauge, static_cast<double>(usage.shards.size()));
  if (store_->memory_limit() != 0) {
    scalar("exposure_filter_memory_limit_bytes",
           "Memory ceiling for user filters (--memory_limit_bytes); absent "
           "when there is none.",
           MetricType::Gauge, static_cast<double>(store_->memory_limit()));
  }
  const EvictionCounts ev = store_->evictions();
  scalar("exposure_filter_memory_evictions_total",
         "Users evicted (least recently active first) to stay under the "
         "memory ceiling.",
         MetricType::Counter, static_cast<double>(ev.users));
  scalar("exposure_filter_memory_evicted_bytes_total",
         "Bytes freed by memory-ceiling evictions.", MetricType::Counter,
         static_cast<double>(ev.bytes));

  // --- Traffic counters ---------------------------------------------------
  const ExposureFilterHandlers::Counters c = handlers_->counters();
  scalar("exposure_filter_items_recorded_total",
         "Items recorded by RecordExposure (new or already present).",
         MetricType::Counter, static_cast<double>(c.items_recorded));
  scalar("exposure_filter_items_expired_total",
         "Items ignored by RecordExposure because their event time was "
         "older than the retention window.",
         MetricType::Counter, static_cast<double>(c.items_expired));
  scalar("exposure_filter_candidates_checked_total",
         "Candidates checked by FilterRecalled.", MetricType::Counter,
         static_cast<double>(c.candidates_checked));
  scalar("exposure_filter_candidates_removed_total",
         "Candidates FilterRecalled removed as already exposed (true "
         "exposures plus false positives).",
         MetricType::Counter, static_cast<double>(c.candidates_removed));
  AddHistogram(out[family("exposure_filter_exposure_lag_seconds",
                          "Server time minus event time of each recorded "
                          "Exposure that carries an event time.",
                          MetricType::Histogram)],
               {}, handlers_->exposure_lag_ms(), 1e-3);

  // --- From the last sweep ------------------------------------------------
  absl::MutexLock lock(&mu_);
  const size_t slices = family(
      "exposure_filter_live_slices",
      "Live time slices over all users, by surface (as of the last sweep).",
      MetricType::Gauge);
  const size_t by_fp =
      family("exposure_filter_users_by_estimated_fp_rate",
             "Users whose estimated false-positive rate is <= le, by surface "
             "(cumulative, as of the last sweep).",
             MetricType::Gauge);
  for (const Surface* s : surfaces) {
    SweepReport::PerSurface per;
    if (s->id < last_sweep_.surfaces.size()) per = last_sweep_.surfaces[s->id];
    AddSample(out[slices], {{"surface", s->name}},
              static_cast<double>(per.live_slices));
    for (size_t i = 0; i < SweepReport::kNumFpRateBounds; ++i) {
      AddSample(out[by_fp],
                {{"surface", s->name},
                 {"le", absl::StrCat(SweepReport::kFpRateBounds[i])}},
                static_cast<double>(per.users_by_fp_rate[i]));
    }
  }
  scalar("exposure_filter_users_aged_out_total",
         "Users whose whole history aged out and were dropped by the sweeper.",
         MetricType::Counter, static_cast<double>(users_aged_out_));
  if (last_sweep_at_ != absl::InfinitePast()) {
    scalar("exposure_filter_last_sweep_timestamp_seconds",
           "When the sweeper last finished a pass (Unix time).",
           MetricType::Gauge,
           absl::ToDoubleSeconds(last_sweep_at_ - absl::UnixEpoch()));
    scalar("exposure_filter_last_sweep_duration_seconds",
           "How long the last sweeper pass took.", MetricType::Gauge,
           absl::ToDoubleSeconds(last_sweep_took_));
  }
  return out;
}

}  // namespace exposure_filter
