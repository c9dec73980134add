#include "src/server/session_hub.h"

#include <xxhash.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "src/server/observability/metric_families.h"
#include "src/server/request_parser.h"
#include "src/server/session_stream.h"

namespace exposure_filter {
namespace {

// Streams a write on this thread queued a message for, kicked once the
// store has released its locks (OnWritesReleased): gRPC's StartWrite may
// run the transport inline, which must not happen under a shard lock.
thread_local std::vector<std::shared_ptr<SessionStream>> tl_kicks;

}  // namespace

SessionHub::SessionHub(const SessionOptions& options)
    : options_(options), shards_(new HubShard[kShards]) {}

SessionHub::~SessionHub() = default;

std::string SessionHub::Key(absl::string_view surface,
                            absl::string_view user_id) {
  std::string key;
  key.reserve(1 + surface.size() + user_id.size());
  key.push_back(static_cast<char>(surface.size()));
  key.append(surface.data(), surface.size());
  key.append(user_id.data(), user_id.size());
  return key;
}

SessionHub::HubShard& SessionHub::ShardFor(absl::string_view key) const {
  return shards_[XXH3_64bits(key.data(), key.size()) % kShards];
}

void SessionHub::OnRecord(absl::string_view surface, absl::string_view user_id,
                          int64_t event_ms,
                          absl::Span<const uint64_t> item_hashes) {
  // The common case, no subscriber at all, costs one load. A subscription
  // counted here was reserved before its registration took the user's
  // shard lock, which this write holds, so it is seen.
  if (subscriptions_.load(std::memory_order_relaxed) == 0) return;
  thread_local std::string key;
  key.clear();
  key.push_back(static_cast<char>(surface.size()));
  key.append(surface.data(), surface.size());
  key.append(user_id.data(), user_id.size());
  HubShard& shard = ShardFor(key);
  MutexLock lock(&shard.mu);
  auto it = shard.topics.find(key);
  if (it == shard.topics.end()) return;
  Topic& topic = it->second;
  ++topic.sequence;
  Publish(topic, surface, user_id, topic.sequence, event_ms, item_hashes,
          /*reset=*/false);
}

void SessionHub::OnDelete(absl::string_view surface,
                          absl::string_view user_id) {
  if (subscriptions_.load(std::memory_order_relaxed) == 0) return;
  const std::string key = Key(surface, user_id);
  HubShard& shard = ShardFor(key);
  MutexLock lock(&shard.mu);
  auto it = shard.topics.find(key);
  if (it == shard.topics.end()) return;
  Topic& topic = it->second;
  ++topic.sequence;
  Publish(topic, surface, user_id, topic.sequence, 0, {}, /*reset=*/true);
}

void SessionHub::Publish(const Topic& topic, absl::string_view surface,
                         absl::string_view user_id, uint64_t sequence,
                         int64_t event_ms,
                         absl::Span<const uint64_t> item_hashes, bool reset) {
  exposure::v1::SessionResponse response;
  exposure::v1::SessionPush* push = response.mutable_push();
  push->set_surface(std::string(surface));
  push->set_user_id(std::string(user_id));
  push->set_sequence(sequence);
  push->set_event_time_ms(event_ms);
  push->mutable_item_hashes()->Add(item_hashes.begin(), item_hashes.end());
  push->set_reset(reset);
  // Serialized once; every subscriber's queue shares the same slices.
  grpc::ByteBuffer message;
  if (!SerializeResponse(response, &message).ok()) return;
  const size_t bytes = message.Length();
  for (SessionSubscription* sub : topic.subscribers) {
    if (sub->stream->EnqueuePush(sub, message, bytes, item_hashes.size())) {
      tl_kicks.push_back(sub->stream->shared_from_this());
    }
  }
}

void SessionHub::OnWritesReleased() {
  if (tl_kicks.empty()) return;
  std::vector<std::shared_ptr<SessionStream>> kicks;
  kicks.swap(tl_kicks);
  for (const std::shared_ptr<SessionStream>& s : kicks) s->Kick();
}

absl::Status SessionHub::AdmitStream(std::shared_ptr<SessionStream> stream) {
  MutexLock lock(&streams_mu_);
  if (shutting_down_) {
    return absl::UnavailableError(
        "session: the server is shutting down; reconnect to another owner");
  }
  if (static_cast<int64_t>(streams_.size()) >= options_.max_streams) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "session: ", streams_.size(),
        " session streams are open, the most --session_max_streams allows; "
        "share streams between threads, or use FilterRecalled"));
  }
  const SessionStream* key = stream.get();
  streams_.emplace(key, std::move(stream));
  return absl::OkStatus();
}

void SessionHub::RemoveStream(const SessionStream* stream) {
  std::shared_ptr<SessionStream> last;  // released after the lock
  MutexLock lock(&streams_mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  last = std::move(it->second);
  streams_.erase(it);
}

size_t SessionHub::streams() const {
  MutexLock lock(&streams_mu_);
  return streams_.size();
}

std::vector<std::shared_ptr<SessionStream>> SessionHub::StreamList(
    bool shutting_down) {
  std::vector<std::shared_ptr<SessionStream>> streams;
  MutexLock lock(&streams_mu_);
  shutting_down_ |= shutting_down;
  streams.reserve(streams_.size());
  for (const auto& [key, stream] : streams_) streams.push_back(stream);
  return streams;
}

void SessionHub::Shutdown() {
  for (const std::shared_ptr<SessionStream>& s :
       StreamList(/*shutting_down=*/true)) {
    s->End(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "session: the server is shutting down; resubscribe "
                        "on another owner"),
           /*drain=*/false, SessionStream::EndReason::kShutdown);
    s->Kick();
  }
}

void SessionHub::Tick(int64_t now_monotonic_ms) {
  for (const std::shared_ptr<SessionStream>& s :
       StreamList(/*shutting_down=*/false)) {
    s->Tick(now_monotonic_ms);
  }
}

absl::Status SessionHub::ReserveSubscription() {
  const int64_t n = subscriptions_.fetch_add(1, std::memory_order_relaxed);
  if (n < options_.max_subscriptions) return absl::OkStatus();
  subscriptions_.fetch_sub(1, std::memory_order_relaxed);
  return absl::ResourceExhaustedError(absl::StrCat(
      "subscribe: the server holds ", n,
      " subscriptions, the most --session_max_subscriptions allows; "
      "unsubscribe users no longer needed, or use FilterRecalled"));
}

void SessionHub::ReleaseSubscription() {
  subscriptions_.fetch_sub(1, std::memory_order_relaxed);
}

uint64_t SessionHub::Register(SessionSubscription* sub) {
  HubShard& shard = ShardFor(sub->key);
  MutexLock lock(&shard.mu);
  Topic& topic = shard.topics[sub->key];
  bool listed = false;
  for (SessionSubscription* s : topic.subscribers) listed |= s == sub;
  if (!listed) topic.subscribers.push_back(sub);
  return topic.sequence;
}

void SessionHub::Unregister(SessionSubscription* sub,
                            absl::FunctionRef<void()> under_lock) {
  HubShard& shard = ShardFor(sub->key);
  MutexLock lock(&shard.mu);
  auto it = shard.topics.find(sub->key);
  if (it != shard.topics.end()) {
    auto& subs = it->second.subscribers;
    for (size_t i = 0; i < subs.size(); ++i) {
      if (subs[i] == sub) {
        subs.erase(subs.begin() + i);
        break;
      }
    }
    // The sequence dies with the last subscriber: a later subscription
    // starts from its own snapshot anyway.
    if (subs.empty()) shard.topics.erase(it);
  }
  under_lock();
}

SessionCounters SessionHub::counters() const {
  auto get = [this](Count c) {
    return counts_[static_cast<int>(c)].load(std::memory_order_relaxed);
  };
  SessionCounters c;
  c.pushes = get(Count::kPush);
  c.pushed_items = pushed_items_.load(std::memory_order_relaxed);
  c.pushes_dropped = get(Count::kPushDropped);
  c.push_batches = get(Count::kPushBatch);
  c.pushes_batched = get(Count::kPushBatched);
  c.snapshots_full = get(Count::kSnapshotFull);
  c.snapshots_not_modified = get(Count::kSnapshotNotModified);
  c.resyncs = get(Count::kResync);
  c.subscriptions_expired = get(Count::kExpired);
  c.ended_client = get(Count::kEndedClient);
  c.ended_overflow = get(Count::kEndedOverflow);
  c.ended_shutdown = get(Count::kEndedShutdown);
  c.ended_limit = get(Count::kEndedLimit);
  c.ended_bad_request = get(Count::kEndedBadRequest);
  c.requests_subscribe = get(Count::kRequestSubscribe);
  c.requests_unsubscribe = get(Count::kRequestUnsubscribe);
  c.requests_filter = get(Count::kRequestFilter);
  c.requests_ping = get(Count::kRequestPing);
  c.requests_invalid = get(Count::kRequestInvalid);
  return c;
}

std::vector<prometheus::MetricFamily> SessionHub::Collect() const {
  using prometheus::MetricType;
  const SessionCounters c = counters();
  std::vector<prometheus::MetricFamily> out;
  auto scalar = [&](const char* name, const char* help, MetricType type,
                    double value) {
    out.push_back(MakeFamily(name, help, type));
    AddSample(out.back(), {}, value);
  };
  auto labelled = [&](const char* name, const char* help, const char* label,
                      std::vector<std::pair<const char*, uint64_t>> values) {
    out.push_back(MakeFamily(name, help, MetricType::Counter));
    for (const auto& [value, n] : values) {
      AddSample(out.back(), {{label, value}}, static_cast<double>(n));
    }
  };
  scalar("exposure_filter_session_streams", "Open session streams.",
         MetricType::Gauge, static_cast<double>(streams()));
  scalar("exposure_filter_session_subscriptions",
         "Session subscriptions, all streams.", MetricType::Gauge,
         static_cast<double>(subscriptions()));
  scalar("exposure_filter_session_queue_bytes",
         "Bytes queued for session clients, all streams (each stream at "
         "most --session_max_queue_bytes).",
         MetricType::Gauge, static_cast<double>(queue_bytes()));
  scalar("exposure_filter_session_pushes_total",
         "Pushes queued (one per applied write and subscribed stream).",
         MetricType::Counter, static_cast<double>(c.pushes));
  scalar("exposure_filter_session_pushed_items_total",
         "Item hashes in the pushes queued.", MetricType::Counter,
         static_cast<double>(c.pushed_items));
  scalar("exposure_filter_session_pushes_dropped_total",
         "Pushes not queued because their subscription awaited a snapshot "
         "(which holds the write).",
         MetricType::Counter, static_cast<double>(c.pushes_dropped));
  scalar("exposure_filter_session_push_batches_total",
         "SessionResponse.pushes messages written (streams opened with "
         "x-exposure-session-push-batches: 1).",
         MetricType::Counter, static_cast<double>(c.push_batches));
  scalar("exposure_filter_session_pushes_batched_total",
         "Pushes written inside those batches.", MetricType::Counter,
         static_cast<double>(c.pushes_batched));
  labelled(
      "exposure_filter_session_snapshots_total",
      "Snapshots queued: full filters, or not_modified.", "kind",
      {{"full", c.snapshots_full}, {"not_modified", c.snapshots_not_modified}});
  scalar("exposure_filter_session_resyncs_total",
         "Streams whose queue overflowed: queued pushes dropped, a resync "
         "notice and fresh snapshots sent.",
         MetricType::Counter, static_cast<double>(c.resyncs));
  labelled("exposure_filter_session_streams_ended_total",
           "Session streams ended, by reason.", "reason",
           {{"client", c.ended_client},
            {"overflow", c.ended_overflow},
            {"shutdown", c.ended_shutdown},
            {"limit", c.ended_limit},
            {"bad_request", c.ended_bad_request}});
  scalar("exposure_filter_session_subscriptions_expired_total",
         "Subscriptions whose lease ran out "
         "(--session_subscription_idle_timeout).",
         MetricType::Counter, static_cast<double>(c.subscriptions_expired));
  labelled("exposure_filter_session_requests_total",
           "Session requests read, by kind.", "kind",
           {{"subscribe", c.requests_subscribe},
            {"unsubscribe", c.requests_unsubscribe},
            {"filter", c.requests_filter},
            {"ping", c.requests_ping},
            {"invalid", c.requests_invalid}});
  return out;
}

}  // namespace exposure_filter
