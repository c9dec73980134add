// PartitionLagTracker: how far behind the Kafka log this copy's filters are
// (for lag-gated reads). Pure bookkeeping, no Kafka types, so the
// definition below is tested with made-up times.
//
// Definitions, per owned partition p (offsets are Kafka's):
//   applied(p)  the next offset this copy has not applied: every message
//               before it is in the store and durable with its offset
//               (KafkaIngest::Flush), or skipped as bad. -1 = not known yet.
//   samples     (t_i, h_i): at time t_i the consumer knew the partition's
//               high watermark h_i (the offset after the broker's last
//               message), read from librdkafka's copy of the last fetch
//               response (rd_kafka_get_watermark_offsets: no round trip).
//   lag(p, now) = 0                if applied(p) >= h of the newest sample
//                                  (nothing known is unapplied, including a
//                                  partition with nothing to read),
//               = now - t_j        otherwise, t_j the time of the OLDEST
//                                  sample with h_j > applied(p): for that
//                                  long this copy has known of a message it
//                                  has not applied.
//   lag(copy)   = max over its partitions; the partition is named.
//
// Why this and not "now - time of the last moment applied == watermark":
// under a steady write stream the consumer is always a batch behind the
// watermark it just fetched, so it is never exactly caught up, and that lag
// would grow without bound on a healthy copy. Here a healthy copy's lag is
// the batching delay (--kafka_max_batch_wait) plus the sample period; a
// stalled one's grows one second per second from the first message it knew
// of and could not apply. Sampling makes it an underestimate of the true
// age of the oldest unapplied message by at most the sample period plus the
// fetch latency (the broker had the message a little before the consumer
// saw the watermark move), never an overestimate except when samples are
// coalesced (kMaxSamples below), which only errs towards "lagging".
// Why not message timestamps: they are the producers' clocks (skew), and
// the next unapplied message's timestamp is not known without fetching it.
//
// replaying(p): true until applied(p) has reached the first watermark this
// copy saw for p after starting (the log tail written while it was down or
// not yet loaded). A copy is replaying while any of its partitions is; it
// does not serve reads then, whatever its lag (a short replay still serves
// stale answers).
//
// Unknown lag is not zero lag. The samples only say what the consumer
// knew; a copy cut off from the brokers learns of no new message, so its
// lag above stays 0 however much is written meanwhile. So each partition
// also keeps `heard(p)`, the last time the brokers confirmed its end: a
// watermark that moved (a fetch response arrived), or an explicit probe
// (ObserveReachable: a ListOffsets round trip that answered). With a bound
// set (SetUnreachableAfter, the server's --max_serving_lag):
//   unreachable(p) = now - heard(p) > bound, and then
//   lag(p, now)   = max(lag as above, now - heard(p)):
// the copy cannot say how far behind it is, only that it has known nothing
// newer for that long, and it counts as lagging at least that much.
//
// Thread-safe: the consumer thread sets applied offsets, a monitor samples
// watermarks, readers read both.
#ifndef EXPOSURE_FILTER_SRC_INGEST_PARTITION_LAG_H_
#define EXPOSURE_FILTER_SRC_INGEST_PARTITION_LAG_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "src/store/annotated_mutex.h"

namespace exposure_filter {

struct PartitionLag {
  int32_t partition = -1;
  absl::Duration lag;      // as defined above
  bool replaying = true;   // not yet caught up to the first watermark seen
  int64_t applied = -1;    // next offset not applied; -1: not known yet
  int64_t watermark = -1;  // newest high watermark known; -1: none yet
  // The brokers have not confirmed the partition's end for longer than the
  // bound: `lag` is then the time since they last did, a lower bound.
  bool unreachable = false;
};

class PartitionLagTracker {
 public:
  // Samples kept per partition while behind; past it the newest two are
  // merged into (older time, newer watermark), which can only make the lag
  // larger than the truth, never hide a stall. At one sample per 100 ms
  // this holds 6.4 s exactly, far past any useful --max_serving_lag.
  static constexpr size_t kMaxSamples = 64;

  // `partitions`: the owned ones, each in [0, partition_count).
  PartitionLagTracker(int32_t partition_count,
                      const std::vector<int32_t>& partitions);

  // Everything before `next_offset` of `partition` is applied. Offsets only
  // move forward (a lower one is ignored). Ignores unowned partitions.
  void SetApplied(int32_t partition, int64_t next_offset);
  // The consumer knew high watermark `high` of `partition` at `now`
  // (monotonic). Negative (unknown) is ignored.
  void ObserveWatermark(int32_t partition, int64_t high, absl::Time now);

  // The brokers answered for `partition` at `now` (a probe's round trip):
  // its end as known is current. Ignores unowned partitions.
  void ObserveReachable(int32_t partition, absl::Time now);
  // Past this without word from the brokers a partition is unreachable
  // (above); zero (the default) never.
  void SetUnreachableAfter(absl::Duration bound);

  // The applied offset (as SetApplied), -1 when not known or not owned.
  // Lock-free: read on the request path (min_offsets).
  int64_t Applied(int32_t partition) const;
  bool Owns(int32_t partition) const;

  // Every owned partition at `now`, ascending.
  std::vector<PartitionLag> All(absl::Time now) const;
  // The copy's lag: a replaying partition first (the lowest), else the one
  // with the largest lag (partition -1 and zero lag when none is owned).
  PartitionLag Worst(absl::Time now) const;

 private:
  struct Sample {
    absl::Time time;
    int64_t high;
  };
  struct State {
    std::deque<Sample> samples;  // increasing time and watermark
    int64_t first_watermark = -1;
    bool caught_up = false;  // reached first_watermark once
    int64_t newest_watermark = -1;
    // When the brokers last confirmed the partition's end; InfinitePast
    // until its first watermark (a partition never heard of is replaying,
    // which refuses reads already).
    absl::Time heard = absl::InfinitePast();
  };
  // Drops the samples `applied` covers; marks the first catch-up.
  static void Trim(State* st, int64_t applied);
  PartitionLag Compute(int32_t partition, const State& st, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Index of an owned partition in partitions_/states_.
  size_t IndexOf(int32_t partition) const;

  const int32_t partition_count_;
  const std::vector<int32_t> partitions_;  // ascending
  // Indexed by partition; -2 = not owned, -1 = owned, offset unknown.
  std::unique_ptr<std::atomic<int64_t>[]> applied_;
  mutable Mutex mu_;
  // Indexed like partitions_.
  std::vector<State> states_ ABSL_GUARDED_BY(mu_);
  absl::Duration unreachable_after_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_INGEST_PARTITION_LAG_H_
