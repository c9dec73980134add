// ServingReadiness: lag-gated reads and read-your-writes
// (docs/scale-out.md "Consistency"). With --replication_factor R >= 2 every
// partition has R copies, each applying the Kafka log at its own pace. A
// copy that is replaying after its start, or lagging more than
// --max_serving_lag behind the log (partition_lag.h defines the lag), says
// NOT_SERVING on health (Kubernetes readiness) and answers the reads
// (FilterRecalled, GetFilter, GetUserStats, Explain) UNAVAILABLE naming its
// lag and partition, so clients and load balancers use another owner.
// Writes are not gated: they go to Kafka, not to this copy.
//
// A monitor thread, every kTick: samples the consumer's watermarks, takes
// the copy's worst partition, and decides:
//   serving -> not serving   when replaying, or lag > max_serving_lag
//                            (a partition the brokers have not confirmed
//                            for longer than that lags at least that long:
//                            unknown lag is not zero lag, partition_lag.h);
//   not serving -> serving   when not replaying and lag <= max/2.
// The half is hysteresis: a copy hovering around the limit would otherwise
// flip readiness (and clients' choice) every tick. Reads follow the same
// decision as health, so a probe and a client never disagree for longer
// than one tick.
//
// Least-stale reads: a read that sets allow_lagging (a client's last try,
// no other owner left) is answered by a copy past --max_serving_lag too,
// and its response says how stale (ReadAdmission below): for a recall
// server an answer that may miss the last seconds of exposures beats a
// failed read. A replaying copy still refuses it: it may not hold the
// user's history at all, and its answer would not be "a little stale" but
// arbitrarily wrong.
//
// Read-your-writes: a read's min_offsets (partition -> offset, from a write
// RPC's written_offsets) is served only once this copy has applied each
// listed offset, i.e. its next unapplied offset is past it; else
// UNAVAILABLE naming partition, applied and wanted offsets. Independent of
// the lag gate (it holds with --max_serving_lag=0 too) and of
// allow_lagging.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SERVING_READINESS_H_
#define EXPOSURE_FILTER_SRC_SERVER_SERVING_READINESS_H_

#include <prometheus/collectable.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "src/ingest/kafka_ingest.h"
#include "src/server/observability/striped_metrics.h"
#include "src/store/annotated_mutex.h"

namespace exposure_filter {

// The reads the gate applies to, for refusal messages and the rpc label.
enum class GatedRead { kFilterRecalled, kGetFilter, kGetUserStats, kExplain };
inline constexpr size_t kGatedReads = 4;
absl::string_view GatedReadName(GatedRead read);

// What a copy admitting a read knows of how stale its answer may be.
struct ReadAdmission {
  int32_t partition = -1;  // the user's
  // The user's partition's lag at the last tick (partition_lag.h).
  absl::Duration lag;
  // Admitted past the gate: the copy is not serving and the read set
  // allow_lagging.
  bool lagging = false;
};

class ServingReadiness final : public prometheus::Collectable {
 public:
  // How often the watermarks are sampled and readiness decided: the lag's
  // resolution, and how stale a refusal's figures are at most.
  static constexpr absl::Duration kTick = absl::Milliseconds(100);

  ServingReadiness();
  ~ServingReadiness() override { Stop(); }

  // Starts gating on `ingest`'s lag (must outlive this until Stop), and
  // with a positive `max_serving_lag` its broker probe
  // (KafkaIngest::WatchBrokerReach). With
  // `max_serving_lag` zero (the gate disabled) the copy always serves, as
  // it did before reads were gated; the lag is still measured and
  // exported, and min_offsets still hold.
  // `on_change(serving)` runs on the monitor thread whenever the decision
  // flips (first call: the initial decision). Call once.
  void Start(KafkaIngest* ingest, absl::Duration max_serving_lag,
             std::function<void(bool)> on_change);
  // Stops the monitor; on_change is not called after it returns. Checks
  // keep answering from the last decision. Idempotent.
  void Stop();

  // OK, filling *admission for a user of `partition` (an owned one), while
  // this copy serves reads, or when it lags past the bound but is not
  // replaying and `allow_lagging` is set; else (also before Start: a copy
  // whose consumer has not started knows nothing of the log) UNAVAILABLE:
  // "<rpc>: this copy is lagging 2.3s behind on partition 7 ..." or
  // "... is replaying partition 7 ...".
  absl::Status Admit(GatedRead read, int32_t partition, bool allow_lagging,
                     ReadAdmission* admission) const;
  // OK when this copy has applied `offset` of `partition` (an owned one);
  // else UNAVAILABLE naming the field, applied and wanted offsets.
  absl::Status CheckApplied(GatedRead read, int32_t partition,
                            int64_t offset) const;
  // Counts a read answered past the gate (admission.lagging), and the lag
  // it was answered at. Called once its answer is complete, so a read
  // refused after admission (say, GetFilter's accepted_formats) is not
  // counted.
  void CountLaggingAnswer(GatedRead read, const ReadAdmission& admission) const;
  bool serving() const { return serving_.load(std::memory_order_acquire); }

  // exposure_filter_serving_ready, exposure_filter_serving_lag_seconds
  // {partition}, exposure_filter_serving_replaying{partition},
  // exposure_filter_reads_refused_total{reason}, exposure_filter_serving_
  // health_flips_total, exposure_filter_reads_lagging_served_total{rpc},
  // exposure_filter_reads_lagging_served_lag_seconds (histogram). Nothing
  // until started.
  // (The server attaches this to the handlers before it serves, and starts
  // it once the consumer runs.)
  std::vector<prometheus::MetricFamily> Collect() const override;

  uint64_t health_flips() const {
    return flips_.load(std::memory_order_relaxed);
  }
  uint64_t lagging_answers(GatedRead read) const {
    return lagging_answers_[static_cast<size_t>(read)].load(
        std::memory_order_relaxed);
  }

 private:
  void MonitorLoop();
  // One tick: sample, decide, publish; returns the decision.
  void Tick();

  // Set once by Start (release), after max_lag_, on_change_ and
  // partition_lag_ms_, which the request path reads only after loading it
  // (acquire).
  std::atomic<KafkaIngest*> ingest_{nullptr};
  absl::Duration max_lag_;
  std::function<void(bool)> on_change_;
  // Each owned partition's lag at the last tick, in ms, indexed by
  // partition (up to the highest owned one): what an admitted read reports
  // without taking the lag tracker's lock on the request path.
  std::unique_ptr<std::atomic<int64_t>[]> partition_lag_ms_;
  int32_t partition_slots_ = 0;
  std::thread monitor_;
  absl::Notification stop_;
  std::atomic<bool> stopped_{false};

  std::atomic<bool> serving_{false};
  mutable Mutex mu_;
  // The worst partition at the last tick, for refusal messages.
  PartitionLag worst_ ABSL_GUARDED_BY(mu_);
  bool decided_ ABSL_GUARDED_BY(mu_) = false;

  mutable std::atomic<uint64_t> refused_lag_{0};
  mutable std::atomic<uint64_t> refused_replaying_{0};
  mutable std::atomic<uint64_t> refused_offsets_{0};
  std::atomic<uint64_t> flips_{0};
  mutable std::array<std::atomic<uint64_t>, kGatedReads> lagging_answers_{};
  // The lag (ms) each lagging answer was served at.
  mutable StripedHistogram lagging_answer_lag_ms_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SERVING_READINESS_H_
