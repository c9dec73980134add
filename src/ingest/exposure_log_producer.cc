#include "src/ingest/exposure_log_producer.h"

#include <librdkafka/rdkafkacpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "exposure_filter/partitioning.h"
#include "src/ingest/kafka_conf.h"
#include "src/ingest/kafka_event_logger.h"

namespace exposure_filter {
namespace {

// Metadata (the topic's partition count) must arrive within this at start,
// as for the consumer (kafka_ingest.cc).
constexpr int kMetadataTimeoutMs = 15000;
// The delivery thread's poll period: how long Close waits for it at most;
// delivery reports wake it at once.
constexpr int kPollMs = 50;

absl::Status SetConf(RdKafka::Conf* conf, const std::string& name,
                     const std::string& value) {
  return SetKafkaConf(conf, "kafka producer config", name, value);
}

// librdkafka's worst-case framing of one v2 record
// (RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD), which it adds to the key, value and
// headers before comparing with message.max.bytes: length (varint of an
// int32, up to 5 bytes) + attributes (1) + timestamp delta (varint int64,
// 10) + offset delta (5) + key length (5) + value length (5) + header count
// (5).
constexpr size_t kRecordFramingBytes = 5 + 1 + 10 + 5 + 5 + 5 + 5;

// Bytes of Kafka's zigzag varint of n >= 0 (a header's name and value
// lengths).
size_t VarintBytes(size_t n) {
  uint64_t zigzag = static_cast<uint64_t>(n) << 1;
  size_t bytes = 1;
  while (zigzag >= 0x80) {
    zigzag >>= 7;
    ++bytes;
  }
  return bytes;
}

}  // namespace

// One Produce() call: its messages' outcomes, and the callback the last one
// runs.
struct ExposureLogProducer::Call {
  std::chrono::steady_clock::time_point start;
  std::atomic<size_t> remaining{0};
  absl::Mutex mu;
  std::vector<LogDeliveryFailure> failures ABSL_GUARDED_BY(mu);
  WrittenOffsets written ABSL_GUARDED_BY(mu);
  Done done;
};

// The opaque of one message: its call and position in it.
struct ExposureLogProducer::Ticket {
  Call* call;
  size_t index;
};

class ExposureLogProducer::DeliveryReports final
    : public RdKafka::DeliveryReportCb {
 public:
  explicit DeliveryReports(ExposureLogProducer* producer)
      : producer_(producer) {}
  void dr_cb(RdKafka::Message& message) override {
    auto* ticket = static_cast<Ticket*>(message.msg_opaque());
    if (message.err() == RdKafka::ERR_NO_ERROR) {
      producer_->Deliver(ticket, nullptr, message.partition(),
                         message.offset());
    } else {
      const std::string error = message.errstr();
      producer_->Deliver(ticket, &error);
    }
  }

 private:
  ExposureLogProducer* const producer_;
};

ExposureLogProducer::ExposureLogProducer(
    const ExposureLogProducerOptions& options)
    : options_(options) {}

absl::StatusOr<std::unique_ptr<ExposureLogProducer>> ExposureLogProducer::Start(
    const ExposureLogProducerOptions& options) {
  std::unique_ptr<ExposureLogProducer> p(new ExposureLogProducer(options));
  p->reports_ = std::make_unique<DeliveryReports>(p.get());
  std::unique_ptr<RdKafka::Conf> conf(
      RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  for (const auto& [name, value] : options.librdkafka_config) {
    if (absl::Status s = SetConf(conf.get(), name, value); !s.ok()) return s;
  }
  const int64_t timeout_ms =
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options.produce_timeout));
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"bootstrap.servers", options.brokers},
           {"client.id", "exposure-filter-writer"},
           // acks=all, retries without duplicates or reordering.
           {"enable.idempotence", "true"},
           {"acks", "all"},
           {"message.timeout.ms", absl::StrCat(timeout_ms)},
           // An RPC waits for its messages: send them at once rather than
           // wait to fill a batch (librdkafka's default is 5 ms).
           {"linger.ms", "0"},
           // Only if someone produces without a partition: the same
           // function as the explicit one below.
           {"partitioner", "murmur2_random"},
       }) {
    if (absl::Status s = SetConf(conf.get(), name, value); !s.ok()) return s;
  }
  std::string err;
  std::string max_bytes;
  if (conf->get("message.max.bytes", max_bytes) != RdKafka::Conf::CONF_OK ||
      !absl::SimpleAtoi(max_bytes, &p->max_message_bytes_) ||
      p->max_message_bytes_ <= 0) {
    return absl::InternalError(absl::StrCat(
        "kafka producer: cannot read message.max.bytes (\"", max_bytes, "\")"));
  }
  conf->set("event_cb", &KafkaEventLogger(), err);
  if (conf->set("dr_cb", p->reports_.get(), err) != RdKafka::Conf::CONF_OK) {
    return absl::InternalError(absl::StrCat("kafka producer dr_cb: ", err));
  }
  p->producer_.reset(RdKafka::Producer::create(conf.get(), err));
  if (p->producer_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("kafka producer for ", options.brokers, ": ", err));
  }
  std::unique_ptr<RdKafka::Topic> topic(
      RdKafka::Topic::create(p->producer_.get(), options.topic, nullptr, err));
  if (topic == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kafka_topic ", options.topic, ": ", err));
  }
  RdKafka::Metadata* raw = nullptr;
  const RdKafka::ErrorCode merr =
      p->producer_->metadata(false, topic.get(), &raw, kMetadataTimeoutMs);
  std::unique_ptr<RdKafka::Metadata> metadata(raw);
  if (merr != RdKafka::ERR_NO_ERROR) {
    return absl::UnavailableError(
        absl::StrCat("kafka producer: no metadata for topic ", options.topic,
                     " from ", options.brokers, ": ", RdKafka::err2str(merr)));
  }
  for (const RdKafka::TopicMetadata* t : *metadata->topics()) {
    if (t->topic() == options.topic && t->err() == RdKafka::ERR_NO_ERROR) {
      p->partition_count_ = static_cast<int32_t>(t->partitions()->size());
    }
  }
  if (p->partition_count_ <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kafka topic ", options.topic, " not found at ", options.brokers));
  }
  if (options.partitions > 0 && p->partition_count_ != options.partitions) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kafka topic ", options.topic, " has ", p->partition_count_,
        " partitions but --partitions=", options.partitions));
  }
  p->poller_ = std::thread([raw_p = p.get()] { raw_p->PollLoop(); });
  return p;
}

ExposureLogProducer::~ExposureLogProducer() { Close(); }

void ExposureLogProducer::PollLoop() {
  while (!closing_.load()) producer_->poll(kPollMs);
}

size_t ExposureLogProducer::RecordBytes(const LogMessage& message) {
  size_t bytes =
      kRecordFramingBytes + message.key.size() + message.value.size();
  if (!message.op.empty()) {
    const size_t name = sizeof(kLogOpHeader) - 1;
    bytes += VarintBytes(name) + name + VarintBytes(message.op.size()) +
             message.op.size();
  }
  return bytes;
}

absl::Status ExposureLogProducer::CheckRecordSizes(
    const std::vector<LogMessage>& messages) const {
  for (const LogMessage& m : messages) {
    const size_t bytes = RecordBytes(m);
    if (bytes <= static_cast<size_t>(max_message_bytes_)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        m.what, ": its Kafka record would be ", bytes,
        " bytes, more than the exposure log producer's message.max.bytes=",
        max_message_bytes_,
        "; nothing of this call was written; send these exposures in "
        "smaller calls (or raise message.max.bytes with --kafka_config, "
        "within the topic's max.message.bytes)"));
  }
  return absl::OkStatus();
}

void ExposureLogProducer::Produce(std::vector<LogMessage> messages, Done done) {
  auto* call = new Call();
  call->start = std::chrono::steady_clock::now();
  call->done = std::move(done);
  // One extra count held by this function: the call cannot complete (and
  // be deleted by a delivery report) while messages are still enqueued.
  call->remaining.store(messages.size() + 1);
  in_flight_.fetch_add(messages.size(), std::memory_order_relaxed);
  {
    absl::ReaderMutexLock lock(&produce_mu_);
    for (size_t i = 0; i < messages.size(); ++i) {
      auto* ticket = new Ticket{call, i};
      if (closed_.load()) {
        const std::string error = "the exposure log producer is shut down";
        Deliver(ticket, &error);
        continue;
      }
      LogMessage& m = messages[i];
      RdKafka::Headers* headers = nullptr;
      if (!m.op.empty()) {
        headers = RdKafka::Headers::create();
        headers->add(kLogOpHeader, m.op.data(), m.op.size());
      }
      const RdKafka::ErrorCode err = producer_->produce(
          options_.topic, KafkaPartitionForKey(m.key, partition_count_),
          RdKafka::Producer::RK_MSG_COPY, m.value.data(), m.value.size(),
          m.key.data(), m.key.size(), /*timestamp=*/0, headers, ticket);
      if (err != RdKafka::ERR_NO_ERROR) {
        delete headers;  // librdkafka owns them only on success
        const std::string error = RdKafka::err2str(err);
        Deliver(ticket, &error);
      }
    }
  }
  if (call->remaining.fetch_sub(1) == 1) FinishCall(call);
}

void ExposureLogProducer::Deliver(Ticket* ticket, const std::string* error,
                                  int32_t partition, int64_t offset) {
  Call* call = ticket->call;
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  if (error == nullptr) {
    acked_.fetch_add(1, std::memory_order_relaxed);
    // An idempotent producer acknowledges a partition's messages in order,
    // but the reports of different calls interleave: keep the maximum.
    if (offset >= 0) {
      absl::MutexLock lock(&call->mu);
      int64_t& highest =
          call->written.try_emplace(partition, offset).first->second;
      highest = std::max(highest, offset);
    }
  } else {
    failed_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&call->mu);
    call->failures.push_back(LogDeliveryFailure{ticket->index, *error});
  }
  delete ticket;
  if (call->remaining.fetch_sub(1) == 1) FinishCall(call);
}

void ExposureLogProducer::FinishCall(Call* call) {
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - call->start)
                        .count();
  size_t bucket = 0;
  while (bucket < kProduceLatencyBoundsMs.size() &&
         ms > static_cast<double>(kProduceLatencyBoundsMs[bucket])) {
    ++bucket;
  }
  latency_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  latency_sum_us_.fetch_add(static_cast<uint64_t>(ms * 1000),
                            std::memory_order_relaxed);
  std::vector<LogDeliveryFailure> failures;
  WrittenOffsets written;
  {
    absl::MutexLock lock(&call->mu);
    failures = std::move(call->failures);
    written = std::move(call->written);
  }
  calls_.fetch_add(1, std::memory_order_relaxed);
  if (!failures.empty()) calls_failed_.fetch_add(1, std::memory_order_relaxed);
  Done done = std::move(call->done);
  delete call;
  std::move(done)(std::move(failures), std::move(written));
}

void ExposureLogProducer::Close(absl::Duration wait) {
  if (closing_.exchange(true)) return;
  if (poller_.joinable()) poller_.join();
  {
    // Waits for Produce calls still enqueueing; later ones fail at once.
    absl::MutexLock lock(&produce_mu_);
    closed_.store(true);
  }
  if (producer_ == nullptr) return;
  // flush() serves the delivery reports on this thread now.
  const RdKafka::ErrorCode err = producer_->flush(
      static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(wait))));
  if (err != RdKafka::ERR_NO_ERROR) {
    spdlog::warn(
        "kafka producer: {} messages not acknowledged at shutdown, their "
        "calls answer UNAVAILABLE",
        producer_->outq_len());
    producer_->purge(RdKafka::Producer::PURGE_QUEUE |
                     RdKafka::Producer::PURGE_INFLIGHT);
    // Purged messages report ERR__PURGE_*: every call completes.
    producer_->flush(1000);
    producer_->poll(0);
  }
  producer_.reset();
}

ExposureLogProducerStats ExposureLogProducer::stats() const {
  ExposureLogProducerStats s;
  s.messages_acked = acked_.load(std::memory_order_relaxed);
  s.messages_failed = failed_.load(std::memory_order_relaxed);
  s.messages_in_flight = in_flight_.load(std::memory_order_relaxed);
  s.calls = calls_.load(std::memory_order_relaxed);
  s.calls_failed = calls_failed_.load(std::memory_order_relaxed);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < latency_counts_.size(); ++i) {
    cumulative += latency_counts_[i].load(std::memory_order_relaxed);
    s.latency_buckets[i] = cumulative;
  }
  s.latency_sum_ms =
      static_cast<double>(latency_sum_us_.load(std::memory_order_relaxed)) /
      1000.0;
  return s;
}

}  // namespace exposure_filter
