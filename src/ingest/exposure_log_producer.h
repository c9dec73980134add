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
#ifndef EXPOSURE_FILTER_SRC_INGEST_EXPOSURE_LOG_PRODUCER_H_
#define EXPOSURE_FILTER_SRC_INGEST_EXPOSURE_LOG_PRODUCER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/ingest/kafka_message_encoder.h"

namespace RdKafka {
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

  const ExposureLogProducerOptions options_;
  int32_t partition_count_ = 0;
  // message.max.bytes as configured (read back from librdkafka).
  int64_t max_message_bytes_ = 0;
  std::unique_ptr<DeliveryReports> reports_;
  std::unique_ptr<RdKafka::Producer> producer_;
  std::atomic<bool> closing_{false};
  // Produce holds it shared while it enqueues; Close takes it to set
  // closed_, so no message is enqueued into a producer being torn down.
  absl::Mutex produce_mu_;
  std::atomic<bool> closed_{false};
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
