// ExposureLogProducer: writes the replicated RPCs' changes to the exposure
// topic. With --replication_factor >= 2 a RecordExposure or
// DeleteUser RPC is not applied by the replica that receives it; it becomes
// messages of the topic (kafka_message_encoder.h), which every owner of the
// user consumes and applies (kafka_ingest.h), so the copies stay equal and
// an acknowledged write survives the loss of any one replica.
//
// Guarantees, from librdkafka's configuration (set here, not overridable):
//   - enable.idempotence=true: acks=all (every in-sync replica of the Kafka
//     partition has the message before it is acknowledged), retries without
//     duplicates or reordering within a partition;
//   - the partition is chosen here, explicitly: Kafka's default keyed
//     partitioner, toPositive(murmur2(user id)) % partitions
//     (include/exposure_filter/partitioning.h, also librdkafka's
//     murmur2_random), i.e. the partition whose owners serve the user;
//   - message.timeout.ms = the produce timeout: a message not acknowledged
//     by then is reported failed, never silently dropped;
//   - message.max.bytes (librdkafka's 1,000,000 unless --kafka_config sets
//     it) bounds one record: CheckRecordSizes refuses a call with a bigger
//     one before any of its messages is enqueued, so none is half-written.
//
// Produce() never blocks: it enqueues and returns; the caller's callback
// runs once, on this producer's delivery thread, when every message of the
// call has its delivery report (or inline, when none could be enqueued).
//
// Fatal errors. An idempotent producer that loses its sequence state
// (librdkafka's rd_kafka_fatal_error: an out-of-order sequence or an
// unknown producer id it cannot recover from) refuses every later message.
// Rather than refuse writes until someone restarts the process, the
// delivery thread rebuilds it in place: writes are refused at once
// (UNAVAILABLE, "being rebuilt"), on_writable(false) runs (the server turns
// health NOT_SERVING), the old handle's queued and in-flight messages are
// purged and their calls answered (never OK unless Kafka acknowledged
// them: a message already in flight may still be in the log, which is why
// the answer says retrying is safe), a new handle is created from the same
// configuration, and on_writable(true) runs. The ExposureLogProducer object
// stays the same, so nothing that holds it needs to know.
#ifndef EXPOSURE_FILTER_SRC_INGEST_EXPOSURE_LOG_PRODUCER_H_
#define EXPOSURE_FILTER_SRC_INGEST_EXPOSURE_LOG_PRODUCER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/ingest/kafka_message_encoder.h"

namespace RdKafka {
class Conf;
class Producer;
class DeliveryReportCb;
}  // namespace RdKafka

namespace exposure_filter {

struct ExposureLogProducerOptions {
  std::string brokers;
  std::string topic = "exposures";
  // The topic must have this many partitions (--partitions); 0 = any.
  int32_t partitions = 0;
  // message.timeout.ms: how long a message may wait for its acknowledgement
  // (retries included) before it is reported failed.
  absl::Duration produce_timeout = absl::Seconds(5);
  // Further librdkafka properties (--kafka_config: security, ...), applied
  // before the ones the guarantees above depend on.
  std::vector<std::pair<std::string, std::string>> librdkafka_config;
  // Runs on the delivery thread when writes stop (false: a fatal error,
  // the handle is being rebuilt) or can be taken again (true: rebuilt).
  // Not called by Start (writes can be taken once it returns) nor after
  // Close.
  std::function<void(bool writable)> on_writable;
  // How long a failed rebuild (librdkafka refused to create the handle)
  // waits before the next try.
  absl::Duration rebuild_retry = absl::Seconds(1);
};

// A message of a call that Kafka did not acknowledge.
struct LogDeliveryFailure {
  size_t index = 0;   // into the call's messages
  std::string error;  // librdkafka's reason
};

// Kafka partition -> offset of the last message of a call that Kafka
// acknowledged there: the read-your-writes token a write RPC answers with.
using WrittenOffsets = absl::btree_map<int32_t, int64_t>;

// Latency of a call, first enqueue to last delivery report, in ms buckets.
inline constexpr std::array<uint64_t, 12> kProduceLatencyBoundsMs = {
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000};

struct ExposureLogProducerStats {
  uint64_t messages_acked = 0;
  uint64_t messages_failed = 0;
  uint64_t messages_in_flight = 0;
  uint64_t calls = 0;         // completed
  uint64_t calls_failed = 0;  // at least one message not acknowledged
  // Cumulative counts per kProduceLatencyBoundsMs bucket, plus +Inf last.
  std::array<uint64_t, kProduceLatencyBoundsMs.size() + 1> latency_buckets{};
  double latency_sum_ms = 0;
  // Handles rebuilt after a fatal error, and whether writes can be taken
  // now (false while a rebuild runs).
  uint64_t rebuilds = 0;
  bool writable = true;
};

class ExposureLogProducer {
 public:
  // `written`: per partition, the highest offset among the call's
  // acknowledged messages (failed ones have none).
  using Done = absl::AnyInvocable<void(std::vector<LogDeliveryFailure>,
                                       WrittenOffsets written) &&>;

  // Connects and checks the topic (exists, partition count).
  static absl::StatusOr<std::unique_ptr<ExposureLogProducer>> Start(
      const ExposureLogProducerOptions& options);
  // Close()s.
  ~ExposureLogProducer();

  // InvalidArgument naming the first of `messages` (its LogMessage::what)
  // whose record is larger than message.max.bytes, with both sizes; OK when
  // every one fits. librdkafka would refuse such a record at enqueue, after
  // the call's earlier messages were enqueued: callers check first.
  absl::Status CheckRecordSizes(const std::vector<LogMessage>& messages) const;
  // The size librdkafka charges a record against message.max.bytes: key,
  // value and headers plus the record's largest framing.
  static size_t RecordBytes(const LogMessage& message);
  int64_t max_message_bytes() const { return max_message_bytes_; }

  // Enqueues `messages`; `done` gets the ones not acknowledged (empty: all
  // are in Kafka with acks=all) and the offsets of the acknowledged ones. After
  // Close, every message fails.
  void Produce(std::vector<LogMessage> messages, Done done);

  // Waits up to `wait` (default: the produce timeout) for what is in
  // flight, fails the rest (their callbacks run, with librdkafka's purge
  // error), stops the delivery thread. Idempotent.
  void Close() { Close(options_.produce_timeout); }
  void Close(absl::Duration wait);

  const std::string& topic() const { return options_.topic; }
  int32_t partition_count() const { return partition_count_; }
  ExposureLogProducerStats stats() const;

  // Tests: raises a fatal error on the current handle as a lost sequence
  // would (librdkafka's rd_kafka_test_fatal_error); the delivery thread
  // then rebuilds it as above.
  void RaiseFatalErrorForTesting(const std::string& reason);

 private:
  struct Call;
  struct Ticket;
  class DeliveryReports;
  explicit ExposureLogProducer(const ExposureLogProducerOptions& options);
  void PollLoop();
  // One message's outcome; the last one completes its call.
  // `partition`/`offset`: where Kafka put it (acknowledged only).
  void Deliver(Ticket* ticket, const std::string* error, int32_t partition = -1,
               int64_t offset = -1);
  void FinishCall(Call* call);
  // On the delivery thread, after `handle` reported a fatal error: refuse
  // writes, answer what it holds, replace it (see the class comment).
  void Rebuild(RdKafka::Producer* handle, const std::string& reason);
  // The text a message fails with while a rebuild runs; `detail` is
  // librdkafka's reason for that message.
  std::string RebuildingError(const std::string& detail) const
      ABSL_LOCKS_EXCLUDED(produce_mu_);
  std::string RebuildingErrorLocked(const std::string& detail) const
      ABSL_SHARED_LOCKS_REQUIRED(produce_mu_);
  // The current handle's fatal error, empty when it has none (or is gone).
  // librdkafka fails or purges messages as it raises the error, so their
  // reports can come before this thread's Rebuild has seen it.
  std::string HandleFatalError() const ABSL_LOCKS_EXCLUDED(produce_mu_);
  std::string HandleFatalErrorLocked() const
      ABSL_SHARED_LOCKS_REQUIRED(produce_mu_);

  const ExposureLogProducerOptions options_;
  int32_t partition_count_ = 0;
  // message.max.bytes as configured (read back from librdkafka).
  int64_t max_message_bytes_ = 0;
  std::unique_ptr<DeliveryReports> reports_;
  // The configuration every handle is created from (a rebuild reuses it).
  std::unique_ptr<RdKafka::Conf> conf_;
  std::atomic<bool> closing_{false};
  // Produce holds it shared while it enqueues; Close takes it to set
  // closed_, and Rebuild to swap the handle, so no message is enqueued
  // into a handle being torn down.
  mutable absl::Mutex produce_mu_;
  std::unique_ptr<RdKafka::Producer> producer_ ABSL_GUARDED_BY(produce_mu_);
  std::atomic<bool> closed_{false};
  // Set while a rebuild runs (Produce refuses at once); the fatal error
  // it answers, for the refusals' text.
  std::atomic<bool> rebuilding_{false};
  std::string fatal_reason_ ABSL_GUARDED_BY(produce_mu_);
  std::atomic<uint64_t> rebuilds_{0};
  std::thread poller_;

  std::atomic<uint64_t> acked_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> in_flight_{0};
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> calls_failed_{0};
  std::array<std::atomic<uint64_t>, kProduceLatencyBoundsMs.size() + 1>
      latency_counts_{};
  std::atomic<uint64_t> latency_sum_us_{0};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_INGEST_EXPOSURE_LOG_PRODUCER_H_
