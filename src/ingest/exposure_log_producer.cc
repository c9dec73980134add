#include "src/ingest/exposure_log_producer.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "exposure_filter/partitioning.h"
#include "src/base/log_rate_limiter.h"
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
// A rebuilt handle's metadata request: short, so that Close (which joins
// the delivery thread running the rebuild) waits at most this long.
constexpr int kRebuildProbeMs = 1000;

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

// The partition count of `topic` as the brokers report it to `handle`
// within `timeout_ms`: Unavailable when they do not answer,
// FailedPrecondition when the topic is not there.
absl::StatusOr<int32_t> TopicPartitions(RdKafka::Producer* handle,
                                        const std::string& topic_name,
                                        int timeout_ms) {
  std::string err;
  std::unique_ptr<RdKafka::Topic> topic(
      RdKafka::Topic::create(handle, topic_name, nullptr, err));
  if (topic == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kafka_topic ", topic_name, ": ", err));
  }
  RdKafka::Metadata* raw = nullptr;
  const RdKafka::ErrorCode merr =
      handle->metadata(false, topic.get(), &raw, timeout_ms);
  std::unique_ptr<RdKafka::Metadata> metadata(raw);
  if (merr != RdKafka::ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat(
        "no metadata for topic ", topic_name, ": ", RdKafka::err2str(merr)));
  }
  for (const RdKafka::TopicMetadata* t : *metadata->topics()) {
    if (t->topic() == topic_name && t->err() == RdKafka::ERR_NO_ERROR &&
        !t->partitions()->empty()) {
      return static_cast<int32_t>(t->partitions()->size());
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("kafka topic ", topic_name, " not found"));
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
      return;
    }
    // A message failed by the fatal error itself, or purged by the rebuild,
    // says so: its caller learns why, and that a retry will be taken.
    const bool rebuilding = message.err() == RdKafka::ERR__FATAL ||
                            producer_->rebuilding_.load() ||
                            !producer_->HandleFatalError().empty();
    const std::string error = rebuilding
                                  ? producer_->RebuildingError(message.errstr())
                                  : message.errstr();
    producer_->Deliver(ticket, &error);
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
  p->conf_.reset(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  RdKafka::Conf* conf = p->conf_.get();
  for (const auto& [name, value] : options.librdkafka_config) {
    if (absl::Status s = SetConf(conf, name, value); !s.ok()) return s;
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
    if (absl::Status s = SetConf(conf, name, value); !s.ok()) return s;
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
  // librdkafka copies the configuration into each handle, so conf_ can
  // create another after a fatal error.
  std::unique_ptr<RdKafka::Producer> handle(
      RdKafka::Producer::create(conf, err));
  if (handle == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("kafka producer for ", options.brokers, ": ", err));
  }
  RdKafka::Producer* const h = handle.get();
  {
    absl::MutexLock lock(&p->produce_mu_);
    p->producer_ = std::move(handle);
  }
  absl::StatusOr<int32_t> partitions =
      TopicPartitions(h, options.topic, kMetadataTimeoutMs);
  if (!partitions.ok()) {
    return absl::Status(
        partitions.status().code(),
        absl::StrCat("kafka producer: ", partitions.status().message(), " at ",
                     options.brokers));
  }
  p->partition_count_ = *partitions;
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
  while (!closing_.load()) {
    // Only this thread replaces the handle, so it stays valid after the
    // lock is released.
    RdKafka::Producer* handle;
    {
      absl::ReaderMutexLock lock(&produce_mu_);
      handle = producer_.get();
    }
    handle->poll(kPollMs);
    std::string reason;
    if (handle->fatal_error(reason) != RdKafka::ERR_NO_ERROR) {
      Rebuild(handle, reason);
    }
  }
}

std::string ExposureLogProducer::RebuildingError(
    const std::string& detail) const {
  absl::ReaderMutexLock lock(&produce_mu_);
  return RebuildingErrorLocked(detail);
}

std::string ExposureLogProducer::RebuildingErrorLocked(
    const std::string& detail) const {
  std::string reason = fatal_reason_;
  if (reason.empty()) reason = HandleFatalErrorLocked();
  if (reason.empty()) reason = "librdkafka reported it";
  return absl::StrCat(
      "the exposure log producer is being rebuilt after a fatal Kafka error (",
      reason, "): ", detail, "; writes are taken again once it is rebuilt");
}

std::string ExposureLogProducer::HandleFatalError() const {
  absl::ReaderMutexLock lock(&produce_mu_);
  return HandleFatalErrorLocked();
}

std::string ExposureLogProducer::HandleFatalErrorLocked() const {
  std::string reason;
  if (producer_ == nullptr ||
      producer_->fatal_error(reason) == RdKafka::ERR_NO_ERROR) {
    return "";
  }
  return reason.empty() ? "librdkafka reported it" : reason;
}

void ExposureLogProducer::Rebuild(RdKafka::Producer* handle,
                                  const std::string& reason) {
  spdlog::error(
      "event=kafka_producer_fatal health=NOT_SERVING reason=\"{}\" "
      "msg=\"the idempotent producer cannot continue; writes answer "
      "UNAVAILABLE while it is rebuilt\"",
      reason);
  {
    // Produce calls still enqueueing finish first; later ones are refused.
    absl::MutexLock lock(&produce_mu_);
    fatal_reason_ = reason;
    rebuilding_.store(true);
  }
  if (options_.on_writable) options_.on_writable(false);
  // Every message the dead handle holds is answered before it goes: purged
  // ones report ERR__PURGE_* through poll() on this thread, failed with
  // the rebuild's text (DeliveryReports). Bounded by the produce timeout,
  // which is what a caller was promised at most.
  handle->purge(RdKafka::Producer::PURGE_QUEUE |
                RdKafka::Producer::PURGE_INFLIGHT);
  const absl::Time drain_until = absl::Now() + options_.produce_timeout;
  while (handle->outq_len() > 0 && absl::Now() < drain_until) {
    handle->poll(kPollMs);
  }
  if (handle->outq_len() > 0) {
    spdlog::warn(
        "kafka producer: {} messages of the failed handle still without a "
        "report after {}; destroying it",
        handle->outq_len(), absl::FormatDuration(options_.produce_timeout));
  }
  // Rebuilt means a new handle that reaches the brokers and sees the topic
  // as Start did: until then writes would only time out, so health stays
  // NOT_SERVING. Each try is short, so Close does not wait long for it.
  std::unique_ptr<RdKafka::Producer> fresh;
  LogRateLimiter retry_log(absl::Seconds(10));
  bool ready = false;
  while (!ready && !closing_.load()) {
    absl::Status tried;
    std::string err;
    if (fresh == nullptr) {
      fresh.reset(RdKafka::Producer::create(conf_.get(), err));
    }
    if (fresh == nullptr) {
      tried = absl::InternalError(absl::StrCat("cannot create: ", err));
    } else {
      absl::StatusOr<int32_t> partitions =
          TopicPartitions(fresh.get(), options_.topic, kRebuildProbeMs);
      tried = partitions.status();
      if (partitions.ok() && *partitions != partition_count_) {
        // Writes partitioned with another count would reach the wrong
        // owners: stay refused until an operator fixes the topic.
        tried = absl::FailedPreconditionError(absl::StrCat(
            "kafka topic ", options_.topic, " now has ", *partitions,
            " partitions, this replica writes with ", partition_count_));
      }
    }
    ready = tried.ok();
    uint64_t suppressed = 0;
    if (!ready && retry_log.Allow(&suppressed)) {
      spdlog::error(
          "kafka producer: not rebuilt yet, writes still refused: {} ({} "
          "similar suppressed)",
          std::string(tried.message()), suppressed);
    }
    if (!ready && fresh == nullptr) absl::SleepFor(options_.rebuild_retry);
  }
  // Closing before a new handle is ready: Close flushes the old one.
  if (!ready) return;
  std::unique_ptr<RdKafka::Producer> old;
  {
    absl::MutexLock lock(&produce_mu_);
    old = std::move(producer_);
    producer_ = std::move(fresh);
    fatal_reason_.clear();
    rebuilding_.store(false);
  }
  old.reset();  // outside the lock: destroying a handle joins its threads
  const uint64_t rebuilds = rebuilds_.fetch_add(1) + 1;
  spdlog::info(
      "event=kafka_producer_rebuilt health=SERVING rebuilds={} "
      "msg=\"writes are taken again\"",
      rebuilds);
  if (options_.on_writable) options_.on_writable(true);
}

void ExposureLogProducer::RaiseFatalErrorForTesting(const std::string& reason) {
  absl::ReaderMutexLock lock(&produce_mu_);
  rd_kafka_test_fatal_error(producer_->c_ptr(),
                            RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                            reason.c_str());
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
      if (rebuilding_.load()) {
        const std::string error = RebuildingErrorLocked("not sent");
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
        // ERR__FATAL: the handle failed before the delivery thread saw it.
        const std::string error =
            err == RdKafka::ERR__FATAL
                ? RebuildingErrorLocked(RdKafka::err2str(err))
                : RdKafka::err2str(err);
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
  std::unique_ptr<RdKafka::Producer> producer;
  {
    // Waits for Produce calls still enqueueing; later ones fail at once.
    absl::MutexLock lock(&produce_mu_);
    closed_.store(true);
    producer = std::move(producer_);
  }
  if (producer == nullptr) return;
  // flush() serves the delivery reports on this thread now.
  const RdKafka::ErrorCode err = producer->flush(
      static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(wait))));
  if (err != RdKafka::ERR_NO_ERROR) {
    spdlog::warn(
        "kafka producer: {} messages not acknowledged at shutdown, their "
        "calls answer UNAVAILABLE",
        producer->outq_len());
    producer->purge(RdKafka::Producer::PURGE_QUEUE |
                    RdKafka::Producer::PURGE_INFLIGHT);
    // Purged messages report ERR__PURGE_*: every call completes.
    producer->flush(1000);
    producer->poll(0);
  }
  producer.reset();
}

ExposureLogProducerStats ExposureLogProducer::stats() const {
  ExposureLogProducerStats s;
  s.messages_acked = acked_.load(std::memory_order_relaxed);
  s.messages_failed = failed_.load(std::memory_order_relaxed);
  s.messages_in_flight = in_flight_.load(std::memory_order_relaxed);
  s.calls = calls_.load(std::memory_order_relaxed);
  s.calls_failed = calls_failed_.load(std::memory_order_relaxed);
  s.rebuilds = rebuilds_.load(std::memory_order_relaxed);
  s.writable = !rebuilding_.load() && !closed_.load();
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
