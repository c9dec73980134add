// FilterReplica::Impl (include/exposure_filter/filter_replica.h), shared by
// its three files: filter_replica.cc (the checks and the public face),
// filter_replica_entries.cc (the copies held: subscribe, age, account,
// evict) and filter_replica_stream.cc (what the stream brings: snapshots,
// pushes, pongs, resyncs, its end and reconnection).
#ifndef EXPOSURE_FILTER_SRC_CLIENT_FILTER_REPLICA_IMPL_H_
#define EXPOSURE_FILTER_SRC_CLIENT_FILTER_REPLICA_IMPL_H_

#include <algorithm>
#include <atomic>
#include <limits>
#include <list>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/filter_cache.h"
#include "exposure_filter/filter_replica.h"
#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "src/base/monotonic_time.h"
#include "src/client/session_call.h"
#include "src/filter/claim_index.h"
#include "src/filter/item_hash_batch.h"
#include "src/filter/pushed_item_bits.h"

namespace exposure_filter {
namespace filter_replica_internal {

namespace v1 = exposure::v1;

inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// Bytes a user costs beyond its filter's: the entry, its keys and map
// slots; and per pushed item, a flat_hash_map slot (hash + slice) and its
// control byte with the table's typical slack.
inline constexpr size_t kEntryOverheadBytes = 256;
inline constexpr size_t kPushedItemBytes = 24;

inline absl::Status FromProto(int32_t code, const std::string& message) {
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

// keep[i] from a KEEP_MASK answer (bit i % 8 of byte i / 8).
inline absl::Status UnpackMask(const std::string& mask, size_t n,
                               uint8_t* keep) {
  if (mask.size() != (n + 7) / 8) {
    return absl::InternalError(absl::StrCat("keep_mask of ", mask.size(),
                                            " bytes for ", n, " candidates"));
  }
  for (size_t i = 0; i < n; ++i) {
    keep[i] = (static_cast<unsigned char>(mask[i / 8]) >> (i % 8)) & 1;
  }
  return absl::OkStatus();
}

inline std::string EntryKey(absl::string_view surface, absl::string_view user) {
  return absl::StrCat(surface.size(), ":", surface, user);
}

struct Entry;

// One user's runs filed for repeated checks (FilterView::FileRuns). The
// replica's list owns the index; a check holds a reference while it
// probes, so dropping the slot never frees an index in use.
struct IndexSlot {
  std::shared_ptr<const ClaimIndex> index;
  size_t bytes = 0;
  std::weak_ptr<Entry> entry;
};

// One user's local copy.
struct Entry {
  Entry(std::string s, std::string u)
      : surface(std::move(s)), user_id(std::move(u)) {}
  const std::string surface;
  const std::string user_id;

  absl::Mutex mu;
  absl::CondVar cv;  // a snapshot or a refusal arrived, or the stream ended
  // The last snapshot's filter (null before the first, and after a reset:
  // nothing claimed) and the same view without the slices aged out since.
  std::shared_ptr<const PulledFilter> filter ABSL_GUARDED_BY(mu);
  FilterView view ABSL_GUARDED_BY(mu);
  // Local checks answered from `view` since it was last replaced: the
  // second files its runs (FilterReplica::Impl::IndexFor); -1 once filing
  // was declined for it.
  int view_checks ABSL_GUARDED_BY(mu) = 0;
  std::string version ABSL_GUARDED_BY(mu);
  // Items pushed since the snapshot: hash -> newest slice index it was
  // recorded in (the one that ages out last).
  absl::flat_hash_map<uint64_t, int64_t> pushed ABSL_GUARDED_BY(mu);
  // The bit filter in front of `pushed`: a check probes the map only for
  // the few candidates whose bit is set, not all 5,000. Cleared only with
  // the whole map.
  PushedItemBits pushed_bits ABSL_GUARDED_BY(mu);

  void AddPushed(uint64_t hash, int64_t slice)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto [it, inserted] = pushed.emplace(hash, slice);
    if (!inserted) it->second = std::max(it->second, slice);
    pushed_bits.Add(hash);
  }
  // Clears keep[i] for each hashes[i] pushed.
  void RemovePushed(const uint64_t* hashes, size_t n, uint8_t* keep) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    RemovePushedItems(pushed_bits, pushed, hashes, n, keep);
  }
  void ClearPushed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    pushed.clear();
    pushed_bits.Clear();
  }
  uint64_t sequence ABSL_GUARDED_BY(mu) = 0;
  // Synced: a snapshot and every push after it, no gap, resync, expiry or
  // broken stream since.
  bool synced ABSL_GUARDED_BY(mu) = false;
  // A subscribe was sent on the current stream and not ended since.
  bool subscribed ABSL_GUARDED_BY(mu) = false;
  bool compacting ABSL_GUARDED_BY(mu) = false;
  absl::Status refused ABSL_GUARDED_BY(mu);  // the last subscribe's error
  int64_t retention_ms ABSL_GUARDED_BY(mu) = 0;
  int64_t span_ms ABSL_GUARDED_BY(mu) = 1;
  // Smallest server time at which a slice held here ages out.
  int64_t next_expiry_ms ABSL_GUARDED_BY(mu) = kNever;
  absl::Time renew_at ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  // The subscribe in flight, to forget its id when any snapshot answers.
  uint64_t subscribe_id ABSL_GUARDED_BY(mu) = 0;
  // Bytes accounted for this user: guarded by the replica's lock, not
  // `mu` (lock order: an entry's lock, then the replica's; never the
  // other way).
  size_t bytes = 0;
  // Its view's runs filed, while the replica's index list holds them
  // (FilterReplica::Impl::indexes_): guarded by the replica's lock too.
  bool indexed = false;
  std::list<IndexSlot>::iterator index_slot;
};

// A mode-A request on the stream, waiting for its answer.
struct PendingFilter {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::string keep_mask ABSL_GUARDED_BY(mu);
};

// What the replica knows of the server's clock and of its own freshness.
struct ServerClock {
  int64_t seen_ms = 0;  // largest server_time_ms received
  // The newest pong: its server time, and when its ping was sent.
  int64_t ref_ms = 0;
  absl::Time ref_sent = absl::InfinitePast();
  bool lagging = false;
};

}  // namespace filter_replica_internal

class FilterReplica::Impl final : public SessionCall::Listener {
  using Entry = filter_replica_internal::Entry;
  using PendingFilter = filter_replica_internal::PendingFilter;
  using ServerClock = filter_replica_internal::ServerClock;
  using IndexSlot = filter_replica_internal::IndexSlot;

 public:
  Impl(std::shared_ptr<grpc::ChannelInterface> channel,
       const FilterReplicaOptions& options)
      : channel_(std::move(channel)),
        stub_(exposure::v1::ExposureFilter::NewStub(channel_)),
        options_(options) {}

  ~Impl() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    pinger_.join();
    std::shared_ptr<SessionCall> call = CurrentCall(/*live_only=*/false);
    if (call != nullptr) {
      call->Cancel();
      call->WaitDone();
    }
  }

  void Start() {
    Reconnect();
    pinger_ = std::thread([this] { PingLoop(); });
  }

  absl::Status Check(absl::string_view surface, absl::string_view user_id,
                     absl::Span<const uint64_t> ids,
                     absl::Span<const std::string> keys, uint8_t* keep,
                     CheckPath* path);
  // Check's local half: true when answered from the copy (see
  // FilterReplica::CheckLocal).
  bool TryLocal(absl::string_view surface, absl::string_view user_id,
                absl::Span<const uint64_t> ids,
                absl::Span<const std::string> keys, uint8_t* keep,
                absl::Time fresh_since,
                std::shared_ptr<const PulledFilter> seed);
  bool Serving() const;
  std::shared_ptr<const PulledFilter> Release(absl::string_view surface,
                                              absl::string_view user_id);
  absl::Status Sync();
  FilterReplicaStats Stats() const;
  void Forget(absl::string_view surface, absl::string_view user_id);
  void NoteShown(absl::string_view surface, absl::string_view user_id,
                 absl::Span<const uint64_t> ids);
  void Reconnect();

  // SessionCall::Listener.
  void OnResponse(const SessionCall* call,
                  const exposure::v1::SessionResponse& r) override;
  void OnEnded(const SessionCall* call, const grpc::Status& status) override;

 private:
  // The stream; with live_only, null once it has ended.
  std::shared_ptr<SessionCall> CurrentCall(bool live_only) const {
    absl::MutexLock lock(&mu_);
    if (live_only && (call_ == nullptr || call_->ended())) return nullptr;
    return call_;
  }
  std::shared_ptr<Entry> GetOrCreate(const std::string& key,
                                     absl::string_view surface,
                                     absl::string_view user);
  std::shared_ptr<Entry> Find(absl::string_view surface,
                              absl::string_view user);
  // Sends a subscribe for `e` with the version it holds, unless `e` was
  // forgotten or evicted since the caller found it.
  void Subscribe(const std::shared_ptr<Entry>& e, SessionCall* call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu);
  // 0 when not sent. `wait`: behind a running write; the pinger does not
  // (it must stay free to notice a write stuck on a server).
  uint64_t SendPing(SessionCall* call, bool wait = true);
  // Drops the slices and pushed items whose expiry the server's clock has
  // passed (`seen_ms`).
  void Age(Entry* e, int64_t seen_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu);
  static void UpdateExpiry(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu);
  // Re-accounts e's bytes (call with e->mu released) and evicts beyond
  // max_bytes.
  void Account(const std::shared_ptr<Entry>& e);
  // Takes users out beyond max_bytes, least recently checked first; the
  // caller unsubscribes them (Drop) once mu_ is released.
  std::vector<std::shared_ptr<Entry>> EvictLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(const std::vector<std::shared_ptr<Entry>>& victims);
  // Replaces e's view; runs filed from the old one are dropped.
  void SetView(Entry* e, FilterView view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The filed runs to check e's view with (`candidates` a check): those
  // held (now the most recently used), or, from the view's second local
  // check on, filed now and kept within max_index_bytes. Null: check
  // without (the first check of a view, or FileRuns declined).
  std::shared_ptr<const ClaimIndex> IndexFor(const std::shared_ptr<Entry>& e,
                                             size_t candidates)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu) ABSL_LOCKS_EXCLUDED(mu_);
  void DropIndexLocked(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FreshLocked(absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // How long pings may go unanswered before the stream is taken as stuck.
  absl::Duration Silence() const {
    return std::max(absl::Seconds(1), 10 * options_.max_staleness);
  }
  absl::Status ModeA(absl::string_view surface, absl::string_view user_id,
                     absl::Span<const uint64_t> ids,
                     absl::Span<const std::string> keys, uint8_t* keep,
                     CheckPath* path);
  void PingLoop();
  void MarkAllUnsynced(bool unsubscribed);

  void OnSnapshot(const exposure::v1::SessionResponse& r);
  void OnPush(const exposure::v1::SessionPush& p);

  const std::shared_ptr<grpc::ChannelInterface> channel_;
  const std::unique_ptr<exposure::v1::ExposureFilter::Stub> stub_;
  const FilterReplicaOptions options_;
  std::atomic<uint64_t> next_id_{1};

  // Serializes Reconnect (the pinger's and the caller's).
  absl::Mutex reconnect_mu_;
  mutable absl::Mutex mu_;
  absl::CondVar pong_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<SessionCall> call_ ABSL_GUARDED_BY(mu_);
  absl::Time reconnect_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  using Lru = std::list<std::shared_ptr<Entry>>;  // most recent first
  Lru lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Lru::iterator> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  ServerClock clock_ ABSL_GUARDED_BY(mu_);
  // Pings in flight: id -> send time.
  absl::flat_hash_map<uint64_t, absl::Time> pings_ ABSL_GUARDED_BY(mu_);
  // Subscribes in flight: id -> user, to route a refusal.
  absl::flat_hash_map<uint64_t, std::weak_ptr<Entry>> subscribes_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<PendingFilter>> filters_
      ABSL_GUARDED_BY(mu_);
  // Filed runs, most recently used first, their bytes at most
  // options_.max_index_bytes.
  std::list<IndexSlot> indexes_ ABSL_GUARDED_BY(mu_);
  uint64_t index_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread pinger_;

  struct Counters {
    std::atomic<uint64_t> local{0}, stream{0}, unary{0}, failed{0};
    std::atomic<uint64_t> not_synced{0}, stale{0}, aging{0};
    std::atomic<uint64_t> snapshots{0}, not_modified{0}, pushes{0},
        pushed_items{0}, noted_items{0}, gaps{0}, resyncs{0}, resets{0},
        expired{0}, compactions{0}, reconnects{0}, evictions{0}, indexed{0};
  };
  Counters n_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_CLIENT_FILTER_REPLICA_IMPL_H_
