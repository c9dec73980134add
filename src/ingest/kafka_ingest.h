// KafkaIngest: the optional Kafka consumer. Messages keyed by user
// id carry exposures (kafka_message_decoder.h); they are recorded in batches
// through the same path as RecordExposure (ExposureSink) and their offsets
// become durable together with the data.
//
// Assignment is manual, never a group rebalance: a partitioned replica
// consumes exactly its own partitions (ReplicaOwnership), an unpartitioned
// server every partition of the topic. Startup fails when the topic's
// partition count differs from --partitions: users would be served by a
// replica that never sees their exposures.
//
// At-least-once: for each batch, (1) the store applies it and the log
// commits it (ExposureSink::Record), (2) a "consumer offsets" record with
// the next offset of every partition the batch advanced is appended and
// committed (StoreDurability::LogConsumerOffsets), (3) only then are the
// offsets committed to the consumer group, for lag tools. On restart the
// consumer seeks to the offsets recovery found (snapshot + log), so a crash
// re-reads at most the batches whose offsets were not yet durable;
// re-adding items to a Bloom filter changes nothing. Without a data_dir
// the group's committed offsets are the start. A partition this data_dir
// has no offset for starts at --kafka_start_offset, not at the group's
// offset: the group may have committed data this directory never held.
//
// Bad messages are counted by reason, logged (rate limited) with partition
// and offset, and skipped: their offsets advance like any other.
#ifndef EXPOSURE_FILTER_SRC_INGEST_KAFKA_INGEST_H_
#define EXPOSURE_FILTER_SRC_INGEST_KAFKA_INGEST_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "src/base/log_rate_limiter.h"
#include "src/cluster/replica_ownership.h"
#include "src/ingest/exposure_sink.h"
#include "src/ingest/kafka_ingest_options.h"
#include "src/ingest/kafka_message_decoder.h"
#include "src/ingest/partition_lag.h"
#include "src/persist/store_durability.h"
#include "src/store/annotated_mutex.h"

namespace RdKafka {
class Consumer;
class KafkaConsumer;
class OffsetCommitCb;
}  // namespace RdKafka

namespace exposure_filter {

struct KafkaPartitionState {
  int32_t partition = 0;
  int64_t position = -1;        // next offset to consume (-1: not yet known)
  int64_t high_watermark = -1;  // offset after the last message (-1: unknown)
  // The lag in messages, when both ends are known.
  int64_t lag() const {
    return position >= 0 && high_watermark >= 0
               ? std::max<int64_t>(0, high_watermark - position)
               : -1;
  }
};

struct KafkaIngestStats {
  uint64_t messages = 0;  // consumed, good and bad
  uint64_t exposures = 0;
  uint64_t items = 0;          // item ids and keys handed to the store
  uint64_t batches = 0;        // recorded and durable
  uint64_t deletes = 0;        // delete_user records applied (replication)
  uint64_t trace_changes = 0;  // trace_add / trace_remove records applied
  std::array<uint64_t, kNumBadMessageReasons> bad_messages{};
  uint64_t record_errors = 0;        // the store or the log refused a batch
  uint64_t group_commit_errors = 0;  // Kafka offset commits that failed
  uint64_t consumer_errors = 0;      // librdkafka errors seen by consume()
  std::vector<KafkaPartitionState> partitions;
};

// The consumer group offsets are committed to: --kafka_group, or with
// replication factor R >= 2 "<group>-<replica ordinal>", since
// the R copies of a partition progress independently.
std::string ConsumerGroupOf(const KafkaIngestOptions& options,
                            const ReplicaOwnership* ownership);

class KafkaIngest {
 public:
  // Connects, checks the topic, assigns the partitions and starts the
  // consumer thread. `ownership` (null = every partition, every user),
  // `sink` and `durability` (null = memory only) must outlive it.
  static absl::StatusOr<std::unique_ptr<KafkaIngest>> Start(
      const KafkaIngestOptions& options, const ReplicaOwnership* ownership,
      ExposureSink* sink, StoreDurability* durability);
  ~KafkaIngest();

  // Stops consuming; the batch in progress is recorded first. Idempotent.
  void Stop();

  KafkaIngestStats stats() const;
  const std::vector<int32_t>& partitions() const { return partitions_; }

  // How far behind the log this copy is (partition_lag.h):
  // applied offsets per partition, replay and lag. Valid after Start.
  const PartitionLagTracker& lag() const { return *lag_; }
  // Feeds lag() the high watermarks librdkafka holds from its last fetch
  // responses (no broker round trip). Called periodically from a thread
  // other than the consumer's, so a consumer stalled on a refused batch
  // still sees the log move on. Safe against Stop().
  void SampleWatermarks(absl::Time now);
  // Unknown lag is not zero lag (partition_lag.h): makes lag() count a
  // partition the brokers have not confirmed for longer than
  // `unreachable_after` as lagging at least that long, and starts a thread
  // that asks the brokers for each owned partition's end (a ListOffsets
  // round trip, timeout = its period) every unreachable_after / 4, between
  // 50 ms and 1 s: a caught-up copy whose partitions are quiet has no
  // fetch response that moves its watermarks to prove it still hears the
  // log. The probe has its own librdkafka handle (same brokers and
  // --kafka_config): on the consumer's connection a ListOffsets request
  // waits behind the fetch the broker holds open (fetch.wait.max.ms, 500 ms
  // by default), which made a healthy copy look cut off. Nothing for a zero
  // or negative bound. Call at most once, after Start; Stop() ends the
  // thread.
  void WatchBrokerReach(absl::Duration unreachable_after);

 private:
  struct PendingBatch;
  KafkaIngest(const KafkaIngestOptions& options,
              const ReplicaOwnership* ownership, ExposureSink* sink,
              StoreDurability* durability);
  absl::Status Assign(int32_t topic_partitions);
  void ConsumeLoop();
  // Decodes and validates one message into `batch` (or counts it as bad).
  // `op` is its ef-op header ("" = none: exposures).
  void Take(int32_t partition, int64_t offset, absl::string_view op,
            absl::string_view key, absl::string_view value,
            PendingBatch* batch);
  // A per-user record (delete_user, trace_add, trace_remove; `op`): the
  // batch so far is recorded first, so the record lands in log order
  // between the user's exposures; retried while the store refuses, until
  // Stop(). False if stopped before it was applied. Unknown ops are not
  // passed here (Take skips them).
  bool ApplyUserRecord(int32_t partition, int64_t offset, absl::string_view op,
                       absl::string_view key, absl::string_view value,
                       PendingBatch* batch);
  // Records the batch, makes its offsets durable, commits them to the
  // group. Retries (the partition stalls, nothing is skipped) while the
  // store or the log refuses, until Stop().
  void Flush(PendingBatch* batch);
  void CommitToGroup(const absl::btree_map<int32_t, int64_t>& next);
  void RefreshPartitionStates();
  void ProbeBrokerReach(absl::Duration period);
  void CountBad(BadMessageReason reason, int32_t partition, int64_t offset,
                const std::string& why);

  const KafkaIngestOptions options_;
  const ReplicaOwnership* const ownership_;
  ExposureSink* const sink_;
  StoreDurability* const durability_;
  const KafkaMessageDecoder decoder_;
  std::unique_ptr<RdKafka::OffsetCommitCb> commit_counter_;
  // Reset by Stop() under consumer_mu_, which SampleWatermarks takes; the
  // consumer thread uses it unlocked (it is joined before the reset).
  std::unique_ptr<RdKafka::KafkaConsumer> consumer_;
  Mutex consumer_mu_;
  std::unique_ptr<PartitionLagTracker> lag_;
  std::vector<int32_t> partitions_;  // assigned, ascending; set in Start

  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // WatchBrokerReach's thread; uses consumer_ unlocked like thread_, and is
  // joined before Stop resets it.
  std::thread prober_;
  absl::Notification prober_stop_;
  // The probe's handle: a plain consumer that never fetches.
  std::unique_ptr<RdKafka::Consumer> probe_;

  std::atomic<uint64_t> messages_{0};
  std::atomic<uint64_t> exposures_{0};
  std::atomic<uint64_t> items_{0};
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> deletes_{0};
  std::atomic<uint64_t> trace_changes_{0};
  std::array<std::atomic<uint64_t>, kNumBadMessageReasons> bad_{};
  std::atomic<uint64_t> record_errors_{0};
  std::atomic<uint64_t> group_commit_errors_{0};
  std::atomic<uint64_t> consumer_errors_{0};
  mutable Mutex states_mu_;
  std::vector<KafkaPartitionState> states_ ABSL_GUARDED_BY(states_mu_);

  // Consumer-thread only: one bad-message line per interval at most.
  LogRateLimiter bad_log_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_INGEST_KAFKA_INGEST_H_
