#include "src/ingest/kafka_ingest.h"

#include <librdkafka/rdkafkacpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "src/base/monotonic_time.h"
#include "src/ingest/kafka_conf.h"
#include "src/ingest/kafka_event_logger.h"
#include "src/ingest/kafka_message_encoder.h"

namespace exposure_filter {
namespace {

// One log line per interval for each repeating condition (bad messages,
// consumer errors, refused batches), with the count held back.
constexpr absl::Duration kLogInterval = absl::Seconds(10);
// Metadata (the topic's partition count) must arrive within this at start.
constexpr int kMetadataTimeoutMs = 15000;
// A refused batch (log failed, store recovering) is retried this often.
constexpr absl::Duration kRetryPeriod = absl::Milliseconds(500);
// Consumer lag is refreshed this often when nothing is flushed.
constexpr absl::Duration kStateRefreshPeriod = absl::Seconds(1);

class CommitResultCounter final : public RdKafka::OffsetCommitCb {
 public:
  explicit CommitResultCounter(std::atomic<uint64_t>* errors)
      : errors_(errors) {}
  void offset_commit_cb(RdKafka::ErrorCode err,
                        std::vector<RdKafka::TopicPartition*>&) override {
    if (err != RdKafka::ERR_NO_ERROR) {
      errors_->fetch_add(1, std::memory_order_relaxed);
      uint64_t suppressed = 0;
      if (limiter_.Allow(&suppressed)) {
        spdlog::warn(
            "kafka: committing offsets to the group failed: {} ({} similar "
            "suppressed; the offsets are durable here, only lag tools are "
            "behind)",
            RdKafka::err2str(err), suppressed);
      }
    }
  }

 private:
  std::atomic<uint64_t>* const errors_;
  LogRateLimiter limiter_{kLogInterval};
};

absl::Status SetConf(RdKafka::Conf* conf, const std::string& name,
                     const std::string& value) {
  return SetKafkaConf(conf, "kafka config", name, value);
}

void SleepUnlessStopping(const std::atomic<bool>& stopping, absl::Duration d) {
  const absl::Time until = absl::Now() + d;
  while (!stopping.load() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace

// Decoded, validated messages waiting to be recorded, and the offsets they
// advance.
struct KafkaIngest::PendingBatch {
  absl::flat_hash_map<std::string, exposure::v1::RecordExposureRequest>
      requests;  // by surface
  size_t exposures = 0;
  size_t items = 0;
  size_t messages = 0;                     // good and bad
  absl::btree_map<int32_t, int64_t> next;  // partition -> next offset
  absl::Time deadline = absl::InfiniteFuture();

  void Clear() {
    requests.clear();
    exposures = items = messages = 0;
    next.clear();
    deadline = absl::InfiniteFuture();
  }
};

std::string ConsumerGroupOf(const KafkaIngestOptions& options,
                            const ReplicaOwnership* ownership) {
  if (ownership == nullptr || ownership->options().replication_factor <= 1) {
    return options.group;
  }
  // Replicated, every partition is consumed by R replicas at their own
  // pace; one shared group would hold whichever copy committed last, so a
  // lag tool would see one copy and a restart without a data_dir could
  // start past what this copy ever applied. One group per ordinal keeps
  // each copy's progress its own.
  return absl::StrCat(options.group, "-", ownership->options().replica_ordinal);
}

KafkaIngest::KafkaIngest(const KafkaIngestOptions& options,
                         const ReplicaOwnership* ownership, ExposureSink* sink,
                         StoreDurability* durability)
    : options_(options),
      ownership_(ownership),
      sink_(sink),
      durability_(durability),
      decoder_(options.format, options.surface,
               ownership != nullptr && ownership->partitioned() ? ownership
                                                                : nullptr),
      bad_log_(kLogInterval) {}

absl::StatusOr<std::unique_ptr<KafkaIngest>> KafkaIngest::Start(
    const KafkaIngestOptions& options, const ReplicaOwnership* ownership,
    ExposureSink* sink, StoreDurability* durability) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  std::unique_ptr<KafkaIngest> ingest(
      new KafkaIngest(options, ownership, sink, durability));
  std::unique_ptr<RdKafka::Conf> conf(
      RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  const int ordinal =
      ownership != nullptr ? ownership->options().replica_ordinal : 0;
  const std::string group = ConsumerGroupOf(options, ownership);
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"bootstrap.servers", options.brokers},
           {"group.id", group},
           {"client.id", absl::StrCat("exposure-filter-", ordinal)},
           // Offsets are committed by hand, after they are durable here.
           {"enable.auto.commit", "false"},
           {"enable.auto.offset.store", "false"},
           {"auto.offset.reset", options.start_offset},
           // The end of a partition is how a copy with nothing (more) to
           // read learns that it has caught up (partition_lag.h).
           {"enable.partition.eof", "true"},
       }) {
    if (absl::Status s = SetConf(conf.get(), name, value); !s.ok()) return s;
  }
  for (const auto& [name, value] : options.librdkafka_config) {
    if (absl::Status s = SetConf(conf.get(), name, value); !s.ok()) return s;
  }
  std::string err;
  conf->set("event_cb", &KafkaEventLogger(), err);
  // Declared before the consumer, so it outlives librdkafka's last call.
  ingest->commit_counter_ =
      std::make_unique<CommitResultCounter>(&ingest->group_commit_errors_);
  conf->set("offset_commit_cb", ingest->commit_counter_.get(), err);
  ingest->consumer_.reset(RdKafka::KafkaConsumer::create(conf.get(), err));
  if (ingest->consumer_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("kafka consumer for ", options.brokers, ": ", err));
  }

  std::unique_ptr<RdKafka::Topic> topic(RdKafka::Topic::create(
      ingest->consumer_.get(), options.topic, nullptr, err));
  if (topic == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kafka_topic ", options.topic, ": ", err));
  }
  RdKafka::Metadata* raw_metadata = nullptr;
  const RdKafka::ErrorCode merr = ingest->consumer_->metadata(
      false, topic.get(), &raw_metadata, kMetadataTimeoutMs);
  std::unique_ptr<RdKafka::Metadata> metadata(raw_metadata);
  if (merr != RdKafka::ERR_NO_ERROR) {
    return absl::UnavailableError(
        absl::StrCat("kafka: no metadata for topic ", options.topic, " from ",
                     options.brokers, " within ", kMetadataTimeoutMs / 1000,
                     "s: ", RdKafka::err2str(merr)));
  }
  int32_t topic_partitions = -1;
  for (const RdKafka::TopicMetadata* t : *metadata->topics()) {
    if (t->topic() != options.topic) continue;
    if (t->err() != RdKafka::ERR_NO_ERROR) {
      return absl::FailedPreconditionError(
          absl::StrCat("kafka topic ", options.topic, ": ",
                       RdKafka::err2str(t->err()), " (--kafka_topic)"));
    }
    topic_partitions = static_cast<int32_t>(t->partitions()->size());
  }
  if (topic_partitions <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kafka topic ", options.topic, " not found at ", options.brokers));
  }
  if (absl::Status s = ingest->Assign(topic_partitions); !s.ok()) return s;
  ingest->thread_ = std::thread([p = ingest.get()] { p->ConsumeLoop(); });
  return ingest;
}

absl::Status KafkaIngest::Assign(int32_t topic_partitions) {
  const bool partitioned = ownership_ != nullptr && ownership_->partitioned();
  if (partitioned && topic_partitions != ownership_->options().partitions) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kafka topic ", options_.topic, " has ", topic_partitions,
        " partitions but --partitions=", ownership_->options().partitions,
        ": replicas would own users whose exposures they never see; set "
        "--partitions to the topic's count (docs/scale-out.md)"));
  }
  if (partitioned) {
    partitions_ = ownership_->OwnedPartitions();
  } else {
    for (int32_t p = 0; p < topic_partitions; ++p) partitions_.push_back(p);
  }
  ConsumerOffsets stored;
  if (durability_ != nullptr) stored = durability_->consumer_offsets();
  if (!stored.topic.empty() && stored.topic != options_.topic) {
    spdlog::warn(
        "kafka: the data_dir holds offsets of topic {}, not {}: starting {} "
        "from --kafka_start_offset={}",
        stored.topic, options_.topic, options_.topic, options_.start_offset);
    stored.next_offset.clear();
  }
  lag_ = std::make_unique<PartitionLagTracker>(topic_partitions, partitions_);
  const int64_t fresh = options_.start_offset == "latest"
                            ? RdKafka::Topic::OFFSET_END
                            : RdKafka::Topic::OFFSET_BEGINNING;
  std::vector<RdKafka::TopicPartition*> assignment;
  std::vector<std::string> described;
  {
    MutexLock lock(&states_mu_);
    for (int32_t p : partitions_) {
      int64_t offset = RdKafka::Topic::OFFSET_STORED;
      std::string from = "group";
      if (durability_ != nullptr) {
        auto it = stored.next_offset.find(p);
        if (it != stored.next_offset.end()) {
          offset = it->second;
          from = absl::StrCat(offset);
        } else {
          offset = fresh;
          from = options_.start_offset;
        }
      }
      assignment.push_back(
          RdKafka::TopicPartition::create(options_.topic, p, offset));
      described.push_back(absl::StrCat(p, "@", from));
      KafkaPartitionState st;
      st.partition = p;
      st.position = offset >= 0 ? offset : -1;
      states_.push_back(st);
      lag_->SetApplied(p, st.position);
    }
  }
  const RdKafka::ErrorCode err = consumer_->assign(assignment);
  for (RdKafka::TopicPartition* tp : assignment) delete tp;
  if (err != RdKafka::ERR_NO_ERROR) {
    return absl::UnavailableError(
        absl::StrCat("kafka assign: ", RdKafka::err2str(err)));
  }
  spdlog::info(
      "kafka: consuming topic {} ({} partitions) format={} group={} "
      "partitions(start)={}",
      options_.topic, topic_partitions, KafkaMessageFormatName(options_.format),
      ConsumerGroupOf(options_, ownership_), absl::StrJoin(described, ","));
  return absl::OkStatus();
}

KafkaIngest::~KafkaIngest() { Stop(); }

void KafkaIngest::Stop() {
  stopping_.store(true);
  if (thread_.joinable()) thread_.join();
  if (prober_.joinable()) {
    prober_stop_.Notify();
    prober_.join();
  }
  probe_.reset();
  MutexLock lock(&consumer_mu_);
  if (consumer_ != nullptr) {
    consumer_->close();
    consumer_.reset();
  }
}

void KafkaIngest::ConsumeLoop() {
  PendingBatch batch;
  absl::Time next_refresh = absl::Now();
  LogRateLimiter error_log(kLogInterval);
  while (!stopping_.load()) {
    const absl::Time now = absl::Now();
    int timeout_ms = 100;
    if (batch.messages > 0) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(batch.deadline - now), 0, 100));
    }
    std::unique_ptr<RdKafka::Message> msg(consumer_->consume(timeout_ms));
    switch (msg->err()) {
      case RdKafka::ERR_NO_ERROR: {
        if (batch.messages == 0) {
          batch.deadline = absl::Now() + options_.max_batch_wait;
        }
        const absl::string_view key =
            msg->key_pointer() == nullptr
                ? absl::string_view()
                : absl::string_view(
                      static_cast<const char*>(msg->key_pointer()),
                      msg->key_len());
        const absl::string_view value(
            static_cast<const char*>(msg->payload()),
            msg->payload() == nullptr ? 0 : msg->len());
        // Exposures carry no ef-op header; the per-user records
        // (delete_user, trace_*) do (kafka_message_encoder.h).
        std::string op;
        if (RdKafka::Headers* headers = msg->headers(); headers != nullptr) {
          const RdKafka::Headers::Header h = headers->get_last(kLogOpHeader);
          if (h.err() == RdKafka::ERR_NO_ERROR && h.value() != nullptr) {
            op.assign(static_cast<const char*>(h.value()), h.value_size());
          }
        }
        Take(msg->partition(), msg->offset(), op, key, value, &batch);
        break;
      }
      case RdKafka::ERR__PARTITION_EOF:
        // Everything before msg->offset() was taken; with none of it
        // waiting in the batch, all of it is applied (a partition with
        // nothing to read, or a tail of bad messages). Otherwise the flush
        // of the batch advances it.
        if (batch.next.find(msg->partition()) == batch.next.end()) {
          lag_->SetApplied(msg->partition(), msg->offset());
        }
        break;
      case RdKafka::ERR__TIMED_OUT:
        break;
      default:
        consumer_errors_.fetch_add(1, std::memory_order_relaxed);
        if (uint64_t suppressed = 0; error_log.Allow(&suppressed)) {
          spdlog::warn("kafka: consume: {} ({} similar suppressed)",
                       msg->errstr(), suppressed);
        }
        break;
    }
    if (batch.messages >= options_.max_batch_messages ||
        (batch.messages > 0 && absl::Now() >= batch.deadline)) {
      Flush(&batch);
    }
    if (absl::Now() >= next_refresh) {
      RefreshPartitionStates();
      next_refresh = absl::Now() + kStateRefreshPeriod;
    }
  }
  // What was taken but not flushed is simply read again at the next start.
  if (batch.messages > 0) Flush(&batch);
}

void KafkaIngest::CountBad(BadMessageReason reason, int32_t partition,
                           int64_t offset, const std::string& why) {
  bad_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  uint64_t suppressed = 0;
  if (!bad_log_.Allow(&suppressed)) return;
  spdlog::warn(
      "kafka: skipped message topic={} partition={} offset={} reason={}: {} "
      "({} more skipped since the last line)",
      options_.topic, partition, offset, BadMessageReasonName(reason), why,
      suppressed);
}

void KafkaIngest::Take(int32_t partition, int64_t offset, absl::string_view op,
                       absl::string_view key, absl::string_view value,
                       PendingBatch* batch) {
  messages_.fetch_add(1, std::memory_order_relaxed);
  if (op == kLogOpDeleteUser || op == kLogOpTraceAdd ||
      op == kLogOpTraceRemove) {
    if (ApplyUserRecord(partition, offset, op, key, value, batch)) {
      ++batch->messages;
      batch->next[partition] = offset + 1;
    }
    return;
  }
  exposure::v1::RecordExposureRequest message;
  std::string why;
  std::optional<BadMessageReason> bad;
  if (!op.empty()) {
    // A record type of a newer version: skipping it loudly beats reading
    // its value as exposures.
    why = absl::StrCat("unknown ", kLogOpHeader, " header \"", op, "\"");
    bad = BadMessageReason::kUndecodable;
  } else {
    bad = decoder_.Decode(key, value, &message, &why);
  }
  if (!bad.has_value()) {
    absl::Status s = sink_->Validate(message);
    if (!s.ok()) {
      bad = absl::IsOutOfRange(s) ? BadMessageReason::kEventTime
                                  : BadMessageReason::kInvalid;
      why = std::string(s.message());
    }
  }
  if (bad.has_value()) {
    CountBad(*bad, partition, offset, why);
  } else {
    size_t items = 0;
    for (const exposure::v1::Exposure& e : message.exposures()) {
      items += e.item_ids_size() + e.item_keys_size();
    }
    // The sink takes at most its RecordExposure limits per call.
    auto it = batch->requests.find(message.surface());
    if (it != batch->requests.end() &&
        (static_cast<size_t>(it->second.exposures_size() +
                             message.exposures_size()) >
             sink_->max_exposures_per_batch() ||
         batch->items + items > sink_->max_items_per_batch())) {
      // Offsets of this message are not in the flushed batch: it advances
      // them only after it is recorded itself.
      Flush(batch);
      batch->deadline = absl::Now() + options_.max_batch_wait;
    }
    exposure::v1::RecordExposureRequest& req =
        batch->requests[message.surface()];
    req.set_surface(message.surface());
    batch->exposures += message.exposures_size();
    batch->items += items;
    for (exposure::v1::Exposure& e : *message.mutable_exposures()) {
      *req.add_exposures() = std::move(e);
    }
  }
  ++batch->messages;
  batch->next[partition] = offset + 1;
}

bool KafkaIngest::ApplyUserRecord(int32_t partition, int64_t offset,
                                  absl::string_view op, absl::string_view key,
                                  absl::string_view value,
                                  PendingBatch* batch) {
  const bool is_delete = op == kLogOpDeleteUser;
  exposure::v1::DeleteUserRequest deletion;
  exposure::v1::TracedUser trace;
  std::string why;
  const std::optional<BadMessageReason> bad =
      is_delete ? decoder_.DecodeDeleteUser(key, value, &deletion, &why)
                : decoder_.DecodeTraceChange(op, key, value, &trace, &why);
  // What the sink does with it, retried below.
  auto apply = [&] {
    return is_delete ? sink_->DeleteUser(deletion)
                     : sink_->TraceUser(trace, op == kLogOpTraceAdd);
  };
  if (bad.has_value()) {
    CountBad(*bad, partition, offset, why);
    return true;
  }
  // Log order per partition: the exposures taken before the record are
  // applied before it, the ones after it after it. A replay (crash before
  // the offsets are durable) applies it again, then re-adds what followed:
  // a delete deletes again, a trace_add of a traced user keeps its
  // traced_since, a trace_remove of an untraced one changes nothing.
  if (batch->messages > 0) {
    Flush(batch);
    if (batch->messages > 0) return false;  // stopped while refused
    batch->deadline = absl::Now() + options_.max_batch_wait;
  }
  LogRateLimiter refusal_log(kLogInterval);
  for (;;) {
    const absl::Status s = apply();
    if (s.ok()) break;
    // A full trace is skipped, not retried: it empties only when an
    // operator removes users, and the partition must not wait for that.
    const bool trace_full = !is_delete && absl::IsResourceExhausted(s);
    if (absl::IsInvalidArgument(s) || trace_full) {
      CountBad(trace_full ? BadMessageReason::kTraceFull
                          : BadMessageReason::kInvalid,
               partition, offset, std::string(s.message()));
      return true;
    }
    record_errors_.fetch_add(1, std::memory_order_relaxed);
    if (uint64_t suppressed = 0; refusal_log.Allow(&suppressed)) {
      spdlog::error(
          "kafka: a {} record refused ({}); the partitions wait and it is "
          "retried ({} retries since the last line)",
          std::string(op), s.ToString(), suppressed);
    }
    if (stopping_.load()) return false;
    SleepUnlessStopping(stopping_, kRetryPeriod);
  }
  (is_delete ? deletes_ : trace_changes_)
      .fetch_add(1, std::memory_order_relaxed);
  if (batch->messages == 0) {
    batch->deadline = absl::Now() + options_.max_batch_wait;
  }
  return true;
}

void KafkaIngest::Flush(PendingBatch* batch) {
  LogRateLimiter refusal_log(kLogInterval);
  auto log_refusal = [&](absl::string_view what, const absl::Status& s) {
    record_errors_.fetch_add(1, std::memory_order_relaxed);
    if (uint64_t suppressed = 0; refusal_log.Allow(&suppressed)) {
      spdlog::error(
          "kafka: {} refused ({}); the partitions wait and the batch is "
          "retried ({} retries since the last line)",
          std::string(what), s.ToString(), suppressed);
    }
  };
  for (auto& [surface, req] : batch->requests) {
    for (;;) {
      absl::Status s = sink_->Record(req);
      if (s.ok()) break;
      log_refusal("recording a batch", s);
      // Not acknowledged: the offsets stay where they were, the messages
      // are read again at the next start.
      if (stopping_.load()) return;
      SleepUnlessStopping(stopping_, kRetryPeriod);
    }
  }
  if (durability_ != nullptr) {
    ConsumerOffsets advanced;
    advanced.topic = options_.topic;
    advanced.next_offset = batch->next;
    durability_->LogConsumerOffsets(advanced);
    for (;;) {
      absl::Status s = durability_->Commit();
      if (s.ok()) break;
      log_refusal("logging consumer offsets", s);
      if (stopping_.load()) return;
      SleepUnlessStopping(stopping_, kRetryPeriod);
    }
  }
  CommitToGroup(batch->next);
  exposures_.fetch_add(batch->exposures, std::memory_order_relaxed);
  items_.fetch_add(batch->items, std::memory_order_relaxed);
  batches_.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock lock(&states_mu_);
    for (KafkaPartitionState& st : states_) {
      auto it = batch->next.find(st.partition);
      if (it != batch->next.end()) st.position = it->second;
    }
  }
  // Applied and durable: reads waiting for these offsets may be served.
  for (const auto& [partition, next] : batch->next) {
    lag_->SetApplied(partition, next);
  }
  batch->Clear();
}

void KafkaIngest::CommitToGroup(const absl::btree_map<int32_t, int64_t>& next) {
  std::vector<RdKafka::TopicPartition*> offsets;
  for (const auto& [partition, offset] : next) {
    offsets.push_back(
        RdKafka::TopicPartition::create(options_.topic, partition, offset));
  }
  // Asynchronous: the offsets are already durable here; the group's copy is
  // for lag tools and for a memory-only restart. Results arrive through
  // offset_commit_cb during consume().
  const RdKafka::ErrorCode err = consumer_->commitAsync(offsets);
  for (RdKafka::TopicPartition* tp : offsets) delete tp;
  if (err != RdKafka::ERR_NO_ERROR) {
    group_commit_errors_.fetch_add(1, std::memory_order_relaxed);
  }
}

void KafkaIngest::RefreshPartitionStates() {
  MutexLock lock(&states_mu_);
  for (KafkaPartitionState& st : states_) {
    int64_t low = -1;
    int64_t high = -1;
    // Cached from the last fetch response: no broker round trip.
    if (consumer_->get_watermark_offsets(options_.topic, st.partition, &low,
                                         &high) == RdKafka::ERR_NO_ERROR &&
        high >= 0) {
      st.high_watermark = high;
    }
  }
}

void KafkaIngest::SampleWatermarks(absl::Time now) {
  MutexLock lock(&consumer_mu_);
  if (consumer_ == nullptr || stopping_.load()) return;
  for (int32_t p : partitions_) {
    int64_t low = -1;
    int64_t high = -1;
    // librdkafka's cached copy from the last fetch response for p.
    if (consumer_->get_watermark_offsets(options_.topic, p, &low, &high) ==
        RdKafka::ERR_NO_ERROR) {
      lag_->ObserveWatermark(p, high, now);
    }
  }
}

void KafkaIngest::WatchBrokerReach(absl::Duration unreachable_after) {
  if (unreachable_after <= absl::ZeroDuration() || lag_ == nullptr) return;
  std::unique_ptr<RdKafka::Conf> conf(
      RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::vector<std::pair<std::string, std::string>> settings = {
      {"bootstrap.servers", options_.brokers},
      {"client.id", "exposure-filter-lag-probe"}};
  settings.insert(settings.end(), options_.librdkafka_config.begin(),
                  options_.librdkafka_config.end());
  for (const auto& [name, value] : settings) {
    if (absl::Status s = SetConf(conf.get(), name, value); !s.ok()) {
      spdlog::error(
          "kafka: no broker probe, a cut-off copy is not detected: {}",
          std::string(s.message()));
      return;
    }
  }
  std::string err;
  conf->set("event_cb", &KafkaEventLogger(), err);
  probe_.reset(RdKafka::Consumer::create(conf.get(), err));
  if (probe_ == nullptr) {
    spdlog::error("kafka: no broker probe, a cut-off copy is not detected: {}",
                  err);
    return;
  }
  lag_->SetUnreachableAfter(unreachable_after);
  // A quarter of the bound: a healthy copy is heard about four times per
  // bound, so one slow or lost round trip does not make it lagging.
  const absl::Duration period = std::clamp(
      unreachable_after / 4, absl::Milliseconds(50), absl::Seconds(1));
  prober_ = std::thread([this, period] { ProbeBrokerReach(period); });
}

void KafkaIngest::ProbeBrokerReach(absl::Duration period) {
  const int timeout_ms =
      static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(period)));
  while (!prober_stop_.WaitForNotificationWithTimeout(period)) {
    for (int32_t p : partitions_) {
      if (stopping_.load()) return;
      int64_t low = -1;
      int64_t high = -1;
      // Blocks up to timeout_ms when the partition's leader is cut off;
      // Stop waits at most that long. Stamped with the time the question
      // was asked: the answer is at least that fresh, and a slow answer
      // must not look fresher than it is.
      const absl::Time asked = MonotonicTime();
      if (probe_->query_watermark_offsets(options_.topic, p, &low, &high,
                                          timeout_ms) !=
          RdKafka::ERR_NO_ERROR) {
        continue;
      }
      lag_->ObserveWatermark(p, high, asked);
      lag_->ObserveReachable(p, asked);
    }
  }
}

KafkaIngestStats KafkaIngest::stats() const {
  KafkaIngestStats s;
  s.messages = messages_.load(std::memory_order_relaxed);
  s.exposures = exposures_.load(std::memory_order_relaxed);
  s.items = items_.load(std::memory_order_relaxed);
  s.batches = batches_.load(std::memory_order_relaxed);
  s.deletes = deletes_.load(std::memory_order_relaxed);
  s.trace_changes = trace_changes_.load(std::memory_order_relaxed);
  for (int i = 0; i < kNumBadMessageReasons; ++i) {
    s.bad_messages[i] = bad_[i].load(std::memory_order_relaxed);
  }
  s.record_errors = record_errors_.load(std::memory_order_relaxed);
  s.group_commit_errors = group_commit_errors_.load(std::memory_order_relaxed);
  s.consumer_errors = consumer_errors_.load(std::memory_order_relaxed);
  MutexLock lock(&states_mu_);
  s.partitions = states_;
  return s;
}

}  // namespace exposure_filter
