#include "src/server/serving_readiness.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/base/monotonic_time.h"
#include "src/server/observability/metric_families.h"

namespace exposure_filter {
namespace {

// "2.3s": a lag to a tenth of a second, the precision the sampling has.
std::string FormatLag(absl::Duration lag) {
  return absl::FormatDuration(absl::Trunc(lag, absl::Milliseconds(100)));
}

// "up to offset 41" (the last applied), or "nothing yet".
std::string AppliedText(int64_t next) {
  return next > 0 ? absl::StrCat("up to offset ", next - 1) : "nothing yet";
}

// Upper bounds (ms) of the lag a lagging answer is served at. Only answers
// past --max_serving_lag (default 1 s; deploy/ runs 5 s) are observed, so
// the buckets start at a tenth of a second (the sampling's resolution) and
// reach past the lag tracker's exact range (kMaxSamples at 100 ms: 6.4 s)
// to the minutes a stalled copy can reach.
std::vector<uint64_t> LaggingAnswerBoundsMs() {
  return {100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000};
}

}  // namespace

absl::string_view GatedReadName(GatedRead read) {
  switch (read) {
    case GatedRead::kFilterRecalled:
      return "FilterRecalled";
    case GatedRead::kGetFilter:
      return "GetFilter";
    case GatedRead::kGetUserStats:
      return "GetUserStats";
    case GatedRead::kExplain:
      return "Explain";
  }
  return "read";
}

ServingReadiness::ServingReadiness()
    : lagging_answer_lag_ms_(LaggingAnswerBoundsMs()) {}

void ServingReadiness::Start(KafkaIngest* ingest,
                             absl::Duration max_serving_lag,
                             std::function<void(bool)> on_change) {
  max_lag_ = max_serving_lag;
  on_change_ = std::move(on_change);
  const std::vector<int32_t>& owned = ingest->partitions();  // ascending
  partition_slots_ = owned.empty() ? 0 : owned.back() + 1;
  partition_lag_ms_.reset(
      new std::atomic<int64_t>[std::max(partition_slots_, 1)]);
  for (int32_t p = 0; p < partition_slots_; ++p) partition_lag_ms_[p] = 0;
  // A copy cut off from the brokers longer than the bound lags (unknown
  // lag is not zero lag): probe them, so quiet partitions are heard too.
  if (max_serving_lag > absl::ZeroDuration()) {
    ingest->WatchBrokerReach(max_serving_lag);
  }
  ingest_.store(ingest, std::memory_order_release);
  Tick();  // the initial decision, before any read is served
  monitor_ = std::thread([this] { MonitorLoop(); });
}

void ServingReadiness::Stop() {
  if (stopped_.exchange(true)) return;
  stop_.Notify();
  if (monitor_.joinable()) monitor_.join();
}

void ServingReadiness::MonitorLoop() {
  while (!stop_.WaitForNotificationWithTimeout(kTick)) Tick();
}

void ServingReadiness::Tick() {
  KafkaIngest* ingest = ingest_.load(std::memory_order_acquire);
  const absl::Time now = MonotonicTime();
  ingest->SampleWatermarks(now);
  for (const PartitionLag& p : ingest->lag().All(now)) {
    if (p.partition >= 0 && p.partition < partition_slots_) {
      partition_lag_ms_[p.partition].store(absl::ToInt64Milliseconds(p.lag),
                                           std::memory_order_relaxed);
    }
  }
  const PartitionLag worst = ingest->lag().Worst(now);
  const bool was = serving_.load(std::memory_order_relaxed);
  bool serving = was;
  if (max_lag_ <= absl::ZeroDuration()) {
    serving = true;  // the gate is off (--max_serving_lag=0)
  } else if (worst.replaying || worst.lag > max_lag_) {
    serving = false;
  } else if (worst.lag <= max_lag_ / 2) {
    serving = true;
  }
  bool first = false;
  {
    MutexLock lock(&mu_);
    worst_ = worst;
    first = !decided_;
    decided_ = true;
  }
  serving_.store(serving, std::memory_order_release);
  if (!first && serving == was) return;
  if (!first) flips_.fetch_add(1, std::memory_order_relaxed);
  if (serving) {
    spdlog::info("event=serving_ready health=SERVING worst_partition={} lag={}",
                 worst.partition, FormatLag(worst.lag));
  } else {
    spdlog::warn(
        "event=serving_not_ready health=NOT_SERVING partition={} "
        "replaying={} unreachable={} lag={} applied={} watermark={} "
        "max_serving_lag={}",
        worst.partition, worst.replaying, worst.unreachable,
        FormatLag(worst.lag), worst.applied, worst.watermark,
        absl::FormatDuration(max_lag_));
  }
  if (on_change_) on_change_(serving);
}

absl::Status ServingReadiness::Admit(GatedRead read, int32_t partition,
                                     bool allow_lagging,
                                     ReadAdmission* admission) const {
  const absl::string_view rpc = GatedReadName(read);
  const bool serving = serving_.load(std::memory_order_acquire);
  // Loaded after serving_: a copy found serving was started (Tick stores
  // serving_ after Start stored ingest_), so the lag slots are there.
  const KafkaIngest* ingest = ingest_.load(std::memory_order_acquire);
  if (ingest != nullptr) {
    admission->partition = partition;
    admission->lag = partition >= 0 && partition < partition_slots_
                         ? absl::Milliseconds(partition_lag_ms_[partition].load(
                               std::memory_order_relaxed))
                         : absl::ZeroDuration();
  }
  if (serving) return absl::OkStatus();
  if (ingest == nullptr) {
    refused_replaying_.fetch_add(1, std::memory_order_relaxed);
    return absl::UnavailableError(absl::StrCat(
        rpc,
        ": starting: this copy's Kafka consumer has not started, it "
        "serves reads once caught up with the log; another owner can "
        "serve this one (docs/scale-out.md)"));
  }
  PartitionLag w;
  {
    MutexLock lock(&mu_);
    w = worst_;
  }
  if (w.replaying) {
    refused_replaying_.fetch_add(1, std::memory_order_relaxed);
    return absl::UnavailableError(absl::StrCat(
        rpc, ": this copy is replaying partition ", w.partition,
        " from Kafka after its start (applied ", AppliedText(w.applied),
        w.watermark >= 0
            ? absl::StrCat(", the log ends at offset ", w.watermark - 1)
            : std::string(", the log's end not known yet"),
        "); it serves reads once caught up",
        allow_lagging ? " (allow_lagging does not apply while replaying: "
                        "this copy may not hold the user's history yet)"
                      : "",
        ": another owner can serve this one (docs/scale-out.md)"));
  }
  if (allow_lagging) {
    admission->lagging = true;
    return absl::OkStatus();
  }
  refused_lag_.fetch_add(1, std::memory_order_relaxed);
  if (w.unreachable) {
    return absl::UnavailableError(absl::StrCat(
        rpc,
        ": this copy has not heard from the Kafka brokers about partition ",
        w.partition, " for ", FormatLag(w.lag), " (--max_serving_lag=",
        absl::FormatDuration(max_lag_), "; applied ", AppliedText(w.applied),
        "): its lag is unknown, at least that long; another owner can serve "
        "this read, or this copy as a last try with allow_lagging "
        "(docs/scale-out.md)"));
  }
  return absl::UnavailableError(absl::StrCat(
      rpc, ": this copy is lagging ", FormatLag(w.lag), " behind on partition ",
      w.partition, " (--max_serving_lag=", absl::FormatDuration(max_lag_),
      "; applied ", AppliedText(w.applied), ", the log ends at offset ",
      w.watermark - 1,
      "): another owner can serve this read, or this copy as a last try "
      "with allow_lagging (docs/scale-out.md)"));
}

void ServingReadiness::CountLaggingAnswer(
    GatedRead read, const ReadAdmission& admission) const {
  if (!admission.lagging) return;
  lagging_answers_[static_cast<size_t>(read)].fetch_add(
      1, std::memory_order_relaxed);
  lagging_answer_lag_ms_.Observe(static_cast<uint64_t>(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(admission.lag))));
}

absl::Status ServingReadiness::CheckApplied(GatedRead read, int32_t partition,
                                            int64_t offset) const {
  const absl::string_view rpc = GatedReadName(read);
  // Applied(p) is the next offset not applied: offset o is applied iff
  // Applied(p) > o (-1, unknown, is below every offset).
  const KafkaIngest* ingest = ingest_.load(std::memory_order_acquire);
  const int64_t next =
      ingest == nullptr ? -1 : ingest->lag().Applied(partition);
  if (next > offset) return absl::OkStatus();
  refused_offsets_.fetch_add(1, std::memory_order_relaxed);
  return absl::UnavailableError(absl::StrCat(
      rpc, ": min_offsets[", partition, "]: this copy has applied partition ",
      partition, " ", AppliedText(next), ", the read needs offset ", offset,
      " applied (a write it must see is not here yet); another owner may "
      "have it, or retry (docs/scale-out.md)"));
}

std::vector<prometheus::MetricFamily> ServingReadiness::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  const KafkaIngest* ingest = ingest_.load(std::memory_order_acquire);
  if (ingest == nullptr) return out;
  using prometheus::MetricType;
  out.push_back(MakeFamily("exposure_filter_serving_ready",
                           "1 while this copy serves reads (health SERVING), "
                           "0 while replaying or lagging past "
                           "--max_serving_lag",
                           MetricType::Gauge));
  AddSample(out.back(), {}, serving() ? 1 : 0);
  prometheus::MetricFamily lag = MakeFamily(
      "exposure_filter_serving_lag_seconds",
      "per owned partition: how long this copy has known of a Kafka message "
      "it has not applied (0: caught up); while unknown (see "
      "exposure_filter_serving_lag_unknown) at least this long "
      "(docs/scale-out.md)",
      MetricType::Gauge);
  prometheus::MetricFamily unknown = MakeFamily(
      "exposure_filter_serving_lag_unknown",
      "per owned partition: 1 while the Kafka brokers have not confirmed the "
      "partition's end for longer than --max_serving_lag (cut off: the lag "
      "is unknown, counted as at least that long)",
      MetricType::Gauge);
  prometheus::MetricFamily replaying =
      MakeFamily("exposure_filter_serving_replaying",
                 "per owned partition: 1 until caught up with the log's end "
                 "seen at start",
                 MetricType::Gauge);
  for (const PartitionLag& p : ingest->lag().All(MonotonicTime())) {
    const MetricLabels labels{{"partition", std::to_string(p.partition)}};
    AddSample(lag, labels, absl::ToDoubleSeconds(p.lag));
    AddSample(replaying, labels, p.replaying ? 1 : 0);
    AddSample(unknown, labels, p.unreachable ? 1 : 0);
  }
  out.push_back(std::move(lag));
  out.push_back(std::move(replaying));
  out.push_back(std::move(unknown));
  out.push_back(MakeFamily("exposure_filter_reads_refused_total",
                           "reads answered UNAVAILABLE by this copy's "
                           "freshness, by reason",
                           MetricType::Counter));
  AddSample(out.back(), {{"reason", "lag"}},
            refused_lag_.load(std::memory_order_relaxed));
  AddSample(out.back(), {{"reason", "replaying"}},
            refused_replaying_.load(std::memory_order_relaxed));
  AddSample(out.back(), {{"reason", "min_offsets"}},
            refused_offsets_.load(std::memory_order_relaxed));
  out.push_back(MakeFamily("exposure_filter_serving_health_flips_total",
                           "readiness changes (SERVING <-> NOT_SERVING) "
                           "after the first decision",
                           MetricType::Counter));
  AddSample(out.back(), {}, flips_.load(std::memory_order_relaxed));
  out.push_back(MakeFamily("exposure_filter_reads_lagging_served_total",
                           "reads answered although this copy lagged past "
                           "--max_serving_lag, because the request set "
                           "allow_lagging (a client's last try), by RPC",
                           MetricType::Counter));
  for (GatedRead read : {GatedRead::kFilterRecalled, GatedRead::kGetFilter,
                         GatedRead::kGetUserStats, GatedRead::kExplain}) {
    AddSample(out.back(), {{"rpc", std::string(GatedReadName(read))}},
              lagging_answers(read));
  }
  out.push_back(MakeFamily(
      "exposure_filter_reads_lagging_served_lag_seconds",
      "the user's partition's lag each read answered past --max_serving_lag "
      "was served at: what such an answer may miss",
      MetricType::Histogram));
  AddHistogram(out.back(), {}, lagging_answer_lag_ms_, 1e-3);
  return out;
}

}  // namespace exposure_filter
