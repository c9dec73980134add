// SessionHub: who is subscribed to which user, for the session stream
// (docs/session-stream.md). The store reports every write it applies here
// (StoreApplyObserver, under the user's shard lock), whether an RPC or the
// Kafka consumer applied it; the hub numbers it in the user's sequence and
// queues one push, serialized once, on every stream subscribed to the user.
//
// Lock order, outermost first: a stream's control lock (its subscription
// set), the store's shard lock, a hub shard's lock, a stream's queue lock.
// The apply path enters at the shard lock; a subscribe holds its stream's
// control lock, takes the shard lock (reader) to pull the filter and, still
// under it, registers here and queues the snapshot: so no write to the user
// can apply between the snapshot and the subscription (subscribe, then
// snapshot). Handing queued messages to gRPC happens after every lock is
// released (OnWritesReleased), never under a shard lock.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SESSION_HUB_H_
#define EXPOSURE_FILTER_SRC_SERVER_SESSION_HUB_H_

#include <prometheus/collectable.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "src/server/config/session_options.h"
#include "src/store/annotated_mutex.h"
#include "src/store/store_apply_observer.h"

namespace exposure_filter {

class SessionStream;
struct SessionSubscription;

// Counters since start, for /metrics and tests.
struct SessionCounters {
  uint64_t pushes = 0;          // pushes queued (per write and subscriber)
  uint64_t pushed_items = 0;    // item hashes in them
  uint64_t pushes_dropped = 0;  // not queued: subscription awaiting snapshot
  uint64_t push_batches = 0;    // SessionResponse.pushes messages written
  uint64_t pushes_batched = 0;  // pushes sent inside them
  uint64_t snapshots_full = 0;
  uint64_t snapshots_not_modified = 0;
  uint64_t resyncs = 0;  // queue overflows answered by a resync
  uint64_t subscriptions_expired = 0;
  // Streams ended, by reason.
  uint64_t ended_client = 0;
  uint64_t ended_overflow = 0;
  uint64_t ended_shutdown = 0;
  uint64_t ended_limit = 0;
  uint64_t ended_bad_request = 0;
  // Requests read, by kind.
  uint64_t requests_subscribe = 0;
  uint64_t requests_unsubscribe = 0;
  uint64_t requests_filter = 0;
  uint64_t requests_ping = 0;
  uint64_t requests_invalid = 0;
};

class SessionHub final : public StoreApplyObserver,
                         public prometheus::Collectable {
 public:
  explicit SessionHub(const SessionOptions& options);
  ~SessionHub() override;
  SessionHub(const SessionHub&) = delete;
  SessionHub& operator=(const SessionHub&) = delete;

  const SessionOptions& options() const { return options_; }

  // The hub's key of a (surface, user): the surface's length (one byte;
  // names are at most 64 bytes), the surface, the user id. Callers validate
  // the surface name first.
  static std::string Key(absl::string_view surface, absl::string_view user_id);

  // --- StoreApplyObserver (under the user's shard lock) ----------------
  void OnRecord(absl::string_view surface, absl::string_view user_id,
                int64_t event_ms,
                absl::Span<const uint64_t> item_hashes) override;
  void OnDelete(absl::string_view surface, absl::string_view user_id) override;
  // Hands what OnRecord/OnDelete queued on this thread to gRPC.
  void OnWritesReleased() override;

  // --- Streams ------------------------------------------------------------
  // Admits a new stream: RESOURCE_EXHAUSTED past --session_max_streams,
  // UNAVAILABLE once shutting down.
  absl::Status AdmitStream(std::shared_ptr<SessionStream> stream);
  void RemoveStream(const SessionStream* stream);
  // Ends every stream UNAVAILABLE and refuses new ones (server shutdown).
  void Shutdown();
  // Housekeeping (about once a second): expires idle subscriptions and
  // retries resync snapshots a stream could not take (a copy that was not
  // serving). `now_monotonic_ms` is the store clock's MonotonicMs.
  void Tick(int64_t now_monotonic_ms);

  // --- Subscriptions (called by streams) --------------------------------
  // Counts one more subscription against --session_max_subscriptions;
  // RESOURCE_EXHAUSTED naming the flag when full.
  absl::Status ReserveSubscription();
  void ReleaseSubscription();
  // Under the user's shard lock (PullUnderLock): adds `sub` to its user's
  // subscribers if it is not one yet, and returns the user's sequence.
  uint64_t Register(SessionSubscription* sub);
  // Removes `sub` from its user's subscribers, then runs `under_lock`
  // while still holding the user's hub lock: a notice queued there is
  // ahead of anything the stream queues after any later write.
  void Unregister(SessionSubscription* sub,
                  absl::FunctionRef<void()> under_lock);

  // --- Accounting shared with the streams -------------------------------
  void AddQueueBytes(int64_t delta) {
    queue_bytes_.fetch_add(delta, std::memory_order_relaxed);
  }
  int64_t queue_bytes() const {
    return queue_bytes_.load(std::memory_order_relaxed);
  }
  int64_t subscriptions() const {
    return subscriptions_.load(std::memory_order_relaxed);
  }
  // The most one stream's queue has held (bytes, messages), since start or
  // the last ResetQueuePeak: the per-stream bound (--session_max_queue_*)
  // is a claim about every instant, which a sampled queue_bytes() cannot
  // check. Streams report each queue growth, under their queue lock.
  void NoteStreamQueue(int64_t bytes, int64_t messages) {
    AtomicMax(&queue_peak_bytes_, bytes);
    AtomicMax(&queue_peak_messages_, messages);
  }
  int64_t queue_peak_bytes() const {
    return queue_peak_bytes_.load(std::memory_order_relaxed);
  }
  int64_t queue_peak_messages() const {
    return queue_peak_messages_.load(std::memory_order_relaxed);
  }
  void ResetQueuePeak() {
    queue_peak_bytes_.store(0, std::memory_order_relaxed);
    queue_peak_messages_.store(0, std::memory_order_relaxed);
  }
  size_t streams() const;
  // Counters are bumped by the streams through these.
  enum class Count {
    kPush,
    kPushDropped,
    kPushBatch,
    kPushBatched,
    kSnapshotFull,
    kSnapshotNotModified,
    kResync,
    kExpired,
    kEndedClient,
    kEndedOverflow,
    kEndedShutdown,
    kEndedLimit,
    kEndedBadRequest,
    kRequestSubscribe,
    kRequestUnsubscribe,
    kRequestFilter,
    kRequestPing,
    kRequestInvalid,
    kNumCounts,
  };
  void Bump(Count c, uint64_t n = 1) {
    counts_[static_cast<int>(c)].fetch_add(n, std::memory_order_relaxed);
  }
  void AddPushedItems(uint64_t n) {
    pushed_items_.fetch_add(n, std::memory_order_relaxed);
  }
  SessionCounters counters() const;

  // exposure_filter_session_* (docs/session-stream.md "Metrics").
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Topic {
    uint64_t sequence = 0;
    absl::InlinedVector<SessionSubscription*, 1> subscribers;
  };
  struct HubShard {
    mutable Mutex mu;
    absl::flat_hash_map<std::string, Topic> topics ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kShards = 64;
  HubShard& ShardFor(absl::string_view key) const;
  // A relaxed maximum: the common case (not a new peak) is one load.
  static void AtomicMax(std::atomic<int64_t>* peak, int64_t value) {
    int64_t seen = peak->load(std::memory_order_relaxed);
    while (value > seen && !peak->compare_exchange_weak(
                               seen, value, std::memory_order_relaxed)) {
    }
  }
  // The open streams (acted on outside the lock); `shutting_down` first
  // refuses new ones.
  std::vector<std::shared_ptr<SessionStream>> StreamList(bool shutting_down);
  // Queues the serialized message on every synced subscriber of `topic`
  // (under its shard lock) and remembers the streams to kick.
  void Publish(const Topic& topic, absl::string_view surface,
               absl::string_view user_id, uint64_t sequence, int64_t event_ms,
               absl::Span<const uint64_t> item_hashes, bool reset);

  const SessionOptions options_;
  std::unique_ptr<HubShard[]> shards_;
  std::atomic<int64_t> subscriptions_{0};
  std::atomic<int64_t> queue_bytes_{0};
  std::atomic<int64_t> queue_peak_bytes_{0};
  std::atomic<int64_t> queue_peak_messages_{0};
  std::atomic<uint64_t> counts_[static_cast<int>(Count::kNumCounts)] = {};
  std::atomic<uint64_t> pushed_items_{0};

  mutable Mutex streams_mu_;
  bool shutting_down_ ABSL_GUARDED_BY(streams_mu_) = false;
  absl::flat_hash_map<const SessionStream*, std::shared_ptr<SessionStream>>
      streams_ ABSL_GUARDED_BY(streams_mu_);
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SESSION_HUB_H_
