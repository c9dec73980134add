#include "exposure_filter/filter_replica.h"

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
#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "src/base/monotonic_time.h"
#include "src/client/session_call.h"
#include "src/filter/item_hash_batch.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// Bytes a user costs beyond its filter's: the entry, its keys and map
// slots; and per pushed item, a flat_hash_map slot (hash + slice) and its
// control byte with the table's typical slack.
constexpr size_t kEntryOverheadBytes = 256;
constexpr size_t kPushedItemBytes = 24;

absl::Status FromProto(int32_t code, const std::string& message) {
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

// keep[i] from a KEEP_MASK answer (bit i % 8 of byte i / 8).
absl::Status UnpackMask(const std::string& mask, size_t n, uint8_t* keep) {
  if (mask.size() != (n + 7) / 8) {
    return absl::InternalError(absl::StrCat("keep_mask of ", mask.size(),
                                            " bytes for ", n, " candidates"));
  }
  for (size_t i = 0; i < n; ++i) {
    keep[i] = (static_cast<unsigned char>(mask[i / 8]) >> (i % 8)) & 1;
  }
  return absl::OkStatus();
}

std::string EntryKey(absl::string_view surface, absl::string_view user) {
  return absl::StrCat(surface.size(), ":", surface, user);
}

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
  std::string version ABSL_GUARDED_BY(mu);
  // Items pushed since the snapshot: hash -> newest slice index it was
  // recorded in (the one that ages out last).
  absl::flat_hash_map<uint64_t, int64_t> pushed ABSL_GUARDED_BY(mu);
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

}  // namespace

class FilterReplica::Impl final : public SessionCall::Listener {
 public:
  Impl(std::shared_ptr<grpc::ChannelInterface> channel,
       const FilterReplicaOptions& options)
      : channel_(std::move(channel)),
        stub_(v1::ExposureFilter::NewStub(channel_)),
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
  absl::Status Sync();
  FilterReplicaStats Stats() const;
  void Forget(absl::string_view surface, absl::string_view user_id);
  void Reconnect();

  // SessionCall::Listener.
  void OnResponse(const SessionCall* call,
                  const v1::SessionResponse& r) override;
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
  // Sends a subscribe for `e` with the version it holds.
  void Subscribe(const std::shared_ptr<Entry>& e, SessionCall* call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu);
  uint64_t SendPing(SessionCall* call);
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
  bool FreshLocked(absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ModeA(absl::string_view surface, absl::string_view user_id,
                     absl::Span<const uint64_t> ids,
                     absl::Span<const std::string> keys, uint8_t* keep,
                     CheckPath* path);
  void PingLoop();
  void MarkAllUnsynced(bool unsubscribed);

  void OnSnapshot(const v1::SessionResponse& r);
  void OnPush(const v1::SessionPush& p);

  const std::shared_ptr<grpc::ChannelInterface> channel_;
  const std::unique_ptr<v1::ExposureFilter::Stub> stub_;
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
  std::thread pinger_;

  struct Counters {
    std::atomic<uint64_t> local{0}, stream{0}, unary{0}, failed{0};
    std::atomic<uint64_t> not_synced{0}, stale{0}, aging{0};
    std::atomic<uint64_t> snapshots{0}, not_modified{0}, pushes{0},
        pushed_items{0}, gaps{0}, resyncs{0}, resets{0}, expired{0},
        compactions{0}, reconnects{0}, evictions{0};
  };
  Counters n_;
};

// --- Checks
// -------------------------------------------------------------------

bool FilterReplica::Impl::FreshLocked(absl::Time now) const {
  return call_ != nullptr && !call_->ended() && !clock_.lagging &&
         clock_.ref_sent >= now - options_.max_staleness;
}

absl::Status FilterReplica::Impl::Check(absl::string_view surface,
                                        absl::string_view user_id,
                                        absl::Span<const uint64_t> ids,
                                        absl::Span<const std::string> keys,
                                        uint8_t* keep, CheckPath* path) {
  const size_t n = ids.size() + keys.size();
  const std::string key = EntryKey(surface, user_id);
  std::shared_ptr<Entry> e = GetOrCreate(key, surface, user_id);
  std::shared_ptr<SessionCall> call = CurrentCall(/*live_only=*/true);
  // absl waits take wall-clock deadlines.
  const absl::Time deadline = absl::Now() + options_.deadline;
  bool first = false;
  {
    absl::MutexLock lock(&e->mu);
    const absl::Time now = MonotonicTime();
    if (call != nullptr && !e->subscribed) {
      first = e->filter == nullptr && !e->synced;
      Subscribe(e, call.get());
    } else if (call != nullptr && e->synced && now >= e->renew_at) {
      // Renew the lease before the server lets it run out; the answer is
      // a fresh snapshot, which also compacts the pushed items.
      Subscribe(e, call.get());
    }
    if (first) {
      // First use: the snapshot (and the pong of the ping sent after the
      // subscribe, right behind it) is one round trip away; waiting for it
      // costs what a mode-A answer would, without the candidates.
      while (!e->synced && e->refused.ok() && e->subscribed &&
             !e->cv.WaitWithDeadline(&e->mu, deadline)) {
      }
    }
  }
  if (first) {
    absl::MutexLock lock(&mu_);
    while (!FreshLocked(MonotonicTime()) && call_ != nullptr &&
           !call_->ended() && !pong_cv_.WaitWithDeadline(&mu_, deadline)) {
    }
  }
  ServerClock clock;
  bool fresh = false;
  {
    absl::MutexLock lock(&mu_);
    clock = clock_;
    fresh = FreshLocked(MonotonicTime());
  }
  // Hash once (the batch kernel), outside any lock.
  thread_local std::vector<uint64_t> hashes;
  if (hashes.size() < n) hashes.resize(n);
  HashItemIds(ids.data(), ids.size(), hashes.data());
  for (size_t i = 0; i < keys.size(); ++i) {
    hashes[ids.size() + i] = HashItemKey(keys[i]);
  }
  {
    absl::MutexLock lock(&e->mu);
    if (!e->synced) {
      n_.not_synced.fetch_add(1, std::memory_order_relaxed);
    } else if (!fresh) {
      n_.stale.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (e->next_expiry_ms <= clock.seen_ms) Age(e.get(), clock.seen_ms);
      // The latest the server's clock can read now: it read the ping
      // after it was sent.
      const int64_t upper =
          clock.ref_ms +
          absl::ToInt64Milliseconds(MonotonicTime() - clock.ref_sent) + 1;
      if (e->next_expiry_ms <= upper) {
        // A slice at its expiry: whether the server still holds it cannot
        // be told from here until a pong shows its clock past it.
        n_.aging.fetch_add(1, std::memory_order_relaxed);
      } else {
        e->view.KeepMaskHashes(absl::MakeConstSpan(hashes.data(), n), keep);
        if (!e->pushed.empty()) {
          for (size_t i = 0; i < n; ++i) {
            if (keep[i] && e->pushed.contains(hashes[i])) keep[i] = 0;
          }
        }
        n_.local.fetch_add(1, std::memory_order_relaxed);
        if (path != nullptr) *path = CheckPath::kLocal;
        return absl::OkStatus();
      }
    }
  }
  absl::Status s = ModeA(surface, user_id, ids, keys, keep, path);
  if (!s.ok()) n_.failed.fetch_add(1, std::memory_order_relaxed);
  return s;
}

absl::Status FilterReplica::Impl::ModeA(absl::string_view surface,
                                        absl::string_view user_id,
                                        absl::Span<const uint64_t> ids,
                                        absl::Span<const std::string> keys,
                                        uint8_t* keep, CheckPath* path) {
  const size_t n = ids.size() + keys.size();
  v1::FilterRecalledRequest f;
  f.set_surface(std::string(surface));
  f.set_user_id(std::string(user_id));
  f.set_mode(v1::KEEP_MASK);
  f.mutable_candidate_ids()->Add(ids.begin(), ids.end());
  for (const std::string& k : keys) f.add_candidate_keys(k);
  std::shared_ptr<SessionCall> call = CurrentCall(/*live_only=*/true);
  if (call != nullptr) {
    const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    auto pending = std::make_shared<PendingFilter>();
    {
      absl::MutexLock lock(&mu_);
      filters_[id] = pending;
    }
    v1::SessionRequest r;
    r.set_request_id(id);
    *r.mutable_filter() = f;
    if (call->Send(std::move(r))) {
      absl::MutexLock lock(&pending->mu);
      pending->mu.AwaitWithDeadline(absl::Condition(&pending->done),
                                    absl::Now() + options_.deadline);
      if (pending->done && pending->status.ok()) {
        n_.stream.fetch_add(1, std::memory_order_relaxed);
        if (path != nullptr) *path = CheckPath::kStream;
        return UnpackMask(pending->keep_mask, n, keep);
      }
      if (pending->done &&
          pending->status.code() != absl::StatusCode::kUnavailable &&
          pending->status.code() != absl::StatusCode::kCancelled) {
        return pending->status;  // the server's answer, e.g. not the owner
      }
      if (!pending->done) {
        absl::MutexLock lock2(&mu_);
        filters_.erase(id);
        return absl::DeadlineExceededError(
            absl::StrCat("session: no answer to a filter request within ",
                         absl::FormatDuration(options_.deadline)));
      }
    } else {
      absl::MutexLock lock(&mu_);
      filters_.erase(id);
    }
  }
  // The stream is down: the unary RPC, same answer.
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.deadline));
  v1::FilterRecalledResponse resp;
  const grpc::Status s = stub_->FilterRecalled(&ctx, f, &resp);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }
  n_.unary.fetch_add(1, std::memory_order_relaxed);
  if (path != nullptr) *path = CheckPath::kUnary;
  return UnpackMask(resp.keep_mask(), n, keep);
}

absl::Status FilterReplica::Impl::Sync() {
  std::shared_ptr<SessionCall> call = CurrentCall(/*live_only=*/false);
  if (call == nullptr || call->ended()) {
    return absl::UnavailableError("session: the stream is down");
  }
  const absl::Time sent = MonotonicTime();
  SendPing(call.get());
  const absl::Time deadline = absl::Now() + options_.deadline;
  absl::MutexLock lock(&mu_);
  while (clock_.ref_sent < sent) {
    if (call_ != call || call->ended()) {
      return absl::UnavailableError("session: the stream ended");
    }
    if (pong_cv_.WaitWithDeadline(&mu_, deadline)) {
      if (clock_.ref_sent >= sent) break;
      return absl::DeadlineExceededError("session: no pong within deadline");
    }
  }
  return absl::OkStatus();
}

// --- Entries
// ------------------------------------------------------------------

std::shared_ptr<Entry> FilterReplica::Impl::GetOrCreate(
    const std::string& key, absl::string_view surface, absl::string_view user) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return *it->second;
  }
  lru_.push_front(
      std::make_shared<Entry>(std::string(surface), std::string(user)));
  entries_.emplace(key, lru_.begin());
  return lru_.front();
}

std::shared_ptr<Entry> FilterReplica::Impl::Find(absl::string_view surface,
                                                 absl::string_view user) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(EntryKey(surface, user));
  return it == entries_.end() ? nullptr : *it->second;
}

void FilterReplica::Impl::Subscribe(const std::shared_ptr<Entry>& e,
                                    SessionCall* call) {
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  v1::SessionRequest r;
  r.set_request_id(id);
  v1::SessionSubscribe* s = r.mutable_subscribe();
  s->set_surface(e->surface);
  s->set_user_id(e->user_id);
  // The version of the filter held: an unchanged user costs no bytes. A
  // user whose pushed items are held is sent in full anyway (its version
  // moved on with them), which is the compaction.
  if (e->filter != nullptr) s->set_if_version(e->version);
  s->add_accepted_formats(2);
  {
    absl::MutexLock lock(&mu_);
    subscribes_.erase(e->subscribe_id);
    subscribes_[id] = e;
  }
  e->subscribe_id = id;
  e->subscribed = true;
  e->refused = absl::OkStatus();
  e->renew_at = absl::InfiniteFuture();  // set by the snapshot
  if (!call->Send(std::move(r))) {
    e->subscribed = false;
    absl::MutexLock lock(&mu_);
    subscribes_.erase(id);
    return;
  }
  // A ping right behind it: its pong arrives just after the snapshot and
  // makes the first check fresh without waiting for the pinger.
  SendPing(call);
}

uint64_t FilterReplica::Impl::SendPing(SessionCall* call) {
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    // A server that answers none of them is not made to queue more: the
    // checks go to mode A (stale) until it does.
    if (pings_.size() >= 256) return 0;
    pings_[id] = MonotonicTime();
  }
  v1::SessionRequest r;
  r.set_request_id(id);
  r.mutable_ping();
  call->Send(std::move(r));
  return id;
}

void FilterReplica::Impl::UpdateExpiry(Entry* e) {
  int64_t next = kNever;
  for (const FilterView::Slice& s : e->view.slices()) {
    next = std::min(next, s.end_ms + e->retention_ms);
  }
  for (const auto& [hash, slice] : e->pushed) {
    next = std::min(next, (slice + 1) * e->span_ms + e->retention_ms);
  }
  e->next_expiry_ms = next;
}

void FilterReplica::Impl::Age(Entry* e, int64_t seen_ms) {
  // The server's rule (a slice is live while its end is after now -
  // retention), with the server's clock as far as it has shown it.
  const int64_t cutoff = seen_ms - e->retention_ms;
  e->view = e->view.WithSlicesEndingAfter(cutoff);
  for (auto it = e->pushed.begin(); it != e->pushed.end();) {
    if ((it->second + 1) * e->span_ms <= cutoff) {
      e->pushed.erase(it++);
    } else {
      ++it;
    }
  }
  UpdateExpiry(e);
}

void FilterReplica::Impl::Account(const std::shared_ptr<Entry>& e) {
  size_t bytes = 0;
  {
    absl::MutexLock lock(&e->mu);
    bytes = kEntryOverheadBytes + e->surface.size() + e->user_id.size() +
            (e->filter != nullptr ? e->filter->size_bytes() : 0) +
            e->pushed.size() * kPushedItemBytes;
  }
  std::vector<std::shared_ptr<Entry>> victims;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(EntryKey(e->surface, e->user_id));
    if (it == entries_.end() || *it->second != e) return;  // evicted
    bytes_ += bytes;
    bytes_ -= e->bytes;
    e->bytes = bytes;
    victims = EvictLocked();
  }
  Drop(victims);
}

std::vector<std::shared_ptr<Entry>> FilterReplica::Impl::EvictLocked() {
  std::vector<std::shared_ptr<Entry>> victims;
  while (bytes_ > options_.max_bytes && lru_.size() > 1) {
    std::shared_ptr<Entry> victim = std::move(lru_.back());
    lru_.pop_back();
    entries_.erase(EntryKey(victim->surface, victim->user_id));
    bytes_ -= victim->bytes;
    victim->bytes = 0;
    n_.evictions.fetch_add(1, std::memory_order_relaxed);
    victims.push_back(std::move(victim));
  }
  return victims;
}

void FilterReplica::Impl::Drop(
    const std::vector<std::shared_ptr<Entry>>& victims) {
  if (victims.empty()) return;
  std::shared_ptr<SessionCall> call = CurrentCall(/*live_only=*/false);
  for (const std::shared_ptr<Entry>& victim : victims) {
    absl::MutexLock lock(&victim->mu);
    victim->synced = false;
    if (!victim->subscribed || call == nullptr) continue;
    victim->subscribed = false;
    v1::SessionRequest r;
    r.set_request_id(next_id_.fetch_add(1, std::memory_order_relaxed));
    r.mutable_unsubscribe()->set_surface(victim->surface);
    r.mutable_unsubscribe()->set_user_id(victim->user_id);
    call->Send(std::move(r));
  }
}

// --- The stream
// ---------------------------------------------------------------

void FilterReplica::Impl::OnResponse(const SessionCall* call,
                                     const v1::SessionResponse& r) {
  {
    absl::MutexLock lock(&mu_);
    if (call != call_.get()) return;  // a stream replaced since
  }
  switch (r.kind_case()) {
    case v1::SessionResponse::kSnapshot:
      OnSnapshot(r);
      return;
    case v1::SessionResponse::kPush:
      OnPush(r.push());
      return;
    case v1::SessionResponse::kFilter:
    case v1::SessionResponse::kError: {
      std::shared_ptr<PendingFilter> pending;
      std::shared_ptr<Entry> refused;
      {
        absl::MutexLock lock(&mu_);
        if (auto it = filters_.find(r.request_id()); it != filters_.end()) {
          pending = std::move(it->second);
          filters_.erase(it);
        } else if (auto s = subscribes_.find(r.request_id());
                   s != subscribes_.end()) {
          refused = s->second.lock();
          subscribes_.erase(s);
        }
      }
      if (pending != nullptr) {
        absl::MutexLock lock(&pending->mu);
        pending->done = true;
        if (r.has_filter()) {
          pending->keep_mask = r.filter().keep_mask();
        } else {
          pending->status = FromProto(r.error().code(), r.error().message());
        }
      } else if (refused != nullptr && r.has_error()) {
        absl::MutexLock lock(&refused->mu);
        refused->refused = FromProto(r.error().code(), r.error().message());
        refused->subscribed = false;
        refused->synced = false;
        refused->cv.SignalAll();
      }
      return;
    }
    case v1::SessionResponse::kPong: {
      absl::MutexLock lock(&mu_);
      auto it = pings_.find(r.request_id());
      if (it == pings_.end()) return;
      const absl::Time sent = it->second;
      // Older pings are answered already or never will be (FIFO).
      for (auto p = pings_.begin(); p != pings_.end();) {
        if (p->second <= sent) {
          pings_.erase(p++);
        } else {
          ++p;
        }
      }
      if (sent >= clock_.ref_sent) {
        clock_.ref_sent = sent;
        clock_.ref_ms = r.pong().server_time_ms();
        clock_.lagging = r.pong().lagging();
      }
      clock_.seen_ms = std::max(clock_.seen_ms, r.pong().server_time_ms());
      pong_cv_.SignalAll();
      return;
    }
    case v1::SessionResponse::kResync:
      n_.resyncs.fetch_add(1, std::memory_order_relaxed);
      MarkAllUnsynced(/*unsubscribed=*/false);
      return;
    case v1::SessionResponse::kUnsubscribed:
      if (r.unsubscribed().reason() == v1::SessionUnsubscribed::IDLE) {
        n_.expired.fetch_add(1, std::memory_order_relaxed);
        if (std::shared_ptr<Entry> e =
                Find(r.unsubscribed().surface(), r.unsubscribed().user_id())) {
          absl::MutexLock lock(&e->mu);
          e->subscribed = false;
          e->synced = false;
        }
      }
      return;
    case v1::SessionResponse::KIND_NOT_SET:
      return;
  }
}

void FilterReplica::Impl::OnSnapshot(const v1::SessionResponse& r) {
  const v1::SessionSnapshot& s = r.snapshot();
  {
    absl::MutexLock lock(&mu_);
    clock_.seen_ms = std::max(clock_.seen_ms, s.server_time_ms());
  }
  std::shared_ptr<Entry> e = Find(s.surface(), s.user_id());
  if (e == nullptr) return;  // evicted since it was subscribed
  uint64_t subscribe_id = 0;
  {
    absl::MutexLock lock(&e->mu);
    subscribe_id = e->subscribe_id;
    e->subscribe_id = 0;
  }
  {
    absl::MutexLock lock(&mu_);
    subscribes_.erase(subscribe_id);
  }
  std::shared_ptr<const PulledFilter> filter;
  if (!s.not_modified()) {
    absl::StatusOr<std::shared_ptr<const PulledFilter>> parsed =
        PulledFilter::Create(s.filter(), s.version());
    if (!parsed.ok()) {
      // Bytes that are not the version announced: never used; the user
      // is answered through mode A until a good snapshot arrives.
      absl::MutexLock lock(&e->mu);
      e->synced = false;
      e->subscribed = false;
      e->refused = parsed.status();
      e->cv.SignalAll();
      return;
    }
    filter = *std::move(parsed);
  }
  {
    absl::MutexLock lock(&e->mu);
    n_.snapshots.fetch_add(1, std::memory_order_relaxed);
    if (s.not_modified()) {
      n_.not_modified.fetch_add(1, std::memory_order_relaxed);
      if (e->filter == nullptr) {
        // not_modified for a version this replica does not hold (a
        // client bug or a reset since): it must not be trusted.
        e->synced = false;
        e->subscribed = false;
        e->cv.SignalAll();
        return;
      }
    } else {
      e->filter = std::move(filter);
      e->version = s.version();
    }
    e->view = e->filter->view();
    e->pushed.clear();
    e->sequence = s.sequence();
    e->retention_ms = s.retention_ms();
    e->span_ms = std::max<int64_t>(1, s.slice_span_ms());
    e->synced = true;
    e->subscribed = true;
    e->compacting = false;
    e->renew_at = MonotonicTime() + absl::Milliseconds(s.idle_timeout_ms()) / 2;
    UpdateExpiry(e.get());
    e->cv.SignalAll();
  }
  Account(e);
}

void FilterReplica::Impl::OnPush(const v1::SessionPush& p) {
  std::shared_ptr<Entry> e = Find(p.surface(), p.user_id());
  if (e == nullptr) return;
  std::shared_ptr<SessionCall> call = CurrentCall(/*live_only=*/false);
  bool account = false;
  {
    absl::MutexLock lock(&e->mu);
    if (!e->synced || p.sequence() <= e->sequence) return;
    n_.pushes.fetch_add(1, std::memory_order_relaxed);
    if (p.sequence() != e->sequence + 1) {
      // A gap: something was lost. Not trusted until a new snapshot.
      n_.gaps.fetch_add(1, std::memory_order_relaxed);
      e->synced = false;
      if (call != nullptr) Subscribe(e, call.get());
      return;
    }
    e->sequence = p.sequence();
    if (p.reset()) {
      n_.resets.fetch_add(1, std::memory_order_relaxed);
      e->filter = nullptr;
      e->version.clear();
      e->view = FilterView();
      e->pushed.clear();
      UpdateExpiry(e.get());
      account = true;
    } else {
      n_.pushed_items.fetch_add(p.item_hashes_size(),
                                std::memory_order_relaxed);
      const int64_t slice = p.event_time_ms() / e->span_ms;
      for (uint64_t h : p.item_hashes()) {
        auto [it, inserted] = e->pushed.emplace(h, slice);
        if (!inserted) it->second = std::max(it->second, slice);
      }
      e->next_expiry_ms = std::min(e->next_expiry_ms,
                                   (slice + 1) * e->span_ms + e->retention_ms);
      account = true;
      if (e->pushed.size() >= options_.compact_after_items && !e->compacting &&
          call != nullptr) {
        n_.compactions.fetch_add(1, std::memory_order_relaxed);
        e->compacting = true;
        Subscribe(e, call.get());
      }
    }
  }
  if (account) Account(e);
}

void FilterReplica::Impl::MarkAllUnsynced(bool unsubscribed) {
  std::vector<std::shared_ptr<Entry>> all;
  {
    absl::MutexLock lock(&mu_);
    all.assign(lru_.begin(), lru_.end());
  }
  for (const std::shared_ptr<Entry>& e : all) {
    absl::MutexLock lock(&e->mu);
    e->synced = false;
    if (unsubscribed) e->subscribed = false;
    e->cv.SignalAll();
  }
}

void FilterReplica::Impl::OnEnded(const SessionCall* call,
                                  const grpc::Status& /*status*/) {
  std::vector<std::shared_ptr<PendingFilter>> pending;
  {
    absl::MutexLock lock(&mu_);
    if (call != call_.get()) return;
    for (auto& [id, p] : filters_) pending.push_back(std::move(p));
    filters_.clear();
    subscribes_.clear();
    pings_.clear();
    reconnect_at_ = MonotonicTime() + options_.reconnect_backoff;
    pong_cv_.SignalAll();
  }
  for (const std::shared_ptr<PendingFilter>& p : pending) {
    absl::MutexLock lock(&p->mu);
    p->done = true;
    p->status = absl::UnavailableError("session: the stream ended");
  }
  MarkAllUnsynced(/*unsubscribed=*/true);
}

void FilterReplica::Impl::Reconnect() {
  absl::MutexLock serial(&reconnect_mu_);
  std::shared_ptr<SessionCall> old = CurrentCall(/*live_only=*/false);
  if (old != nullptr) {
    // Still the current call while it ends, so OnEnded unsyncs every user
    // and fails the requests waiting on it: nothing held from it is
    // trusted on the new stream, where no user is subscribed yet.
    old->Cancel();
    old->WaitDone();
    n_.reconnects.fetch_add(1, std::memory_order_relaxed);
  }
  std::shared_ptr<SessionCall> call = SessionCall::Start(stub_.get(), this);
  absl::MutexLock lock(&mu_);
  call_ = std::move(call);
  clock_.ref_sent = absl::InfinitePast();  // nothing vouched for yet
  pings_.clear();
}

void FilterReplica::Impl::PingLoop() {
  while (true) {
    std::shared_ptr<SessionCall> call;
    bool reconnect = false;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                               options_.ping_interval)) {
        return;
      }
      call = call_;
      const absl::Time now = MonotonicTime();
      reconnect = (call == nullptr || call->ended()) && now >= reconnect_at_;
      // Pings unanswered for long: the server or the connection is stuck
      // (a broken connection can take keepalive's minutes to notice).
      const absl::Duration silence =
          std::max(absl::Seconds(1), 10 * options_.max_staleness);
      for (const auto& [id, sent] : pings_) {
        if (now - sent > silence) reconnect = true;
      }
      if (lru_.empty()) call = nullptr;  // nothing to keep fresh
    }
    if (reconnect) {
      Reconnect();
    } else if (call != nullptr && !call->ended()) {
      SendPing(call.get());
    }
  }
}

void FilterReplica::Impl::Forget(absl::string_view surface,
                                 absl::string_view user_id) {
  std::vector<std::shared_ptr<Entry>> victims;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(EntryKey(surface, user_id));
    if (it == entries_.end()) return;
    std::shared_ptr<Entry> e = *it->second;
    bytes_ -= e->bytes;
    e->bytes = 0;
    lru_.erase(it->second);
    entries_.erase(it);
    victims.push_back(std::move(e));
  }
  Drop(victims);
}

FilterReplicaStats FilterReplica::Impl::Stats() const {
  FilterReplicaStats s;
  auto get = [](const std::atomic<uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  s.local_checks = get(n_.local);
  s.stream_checks = get(n_.stream);
  s.unary_checks = get(n_.unary);
  s.failed_checks = get(n_.failed);
  s.not_synced = get(n_.not_synced);
  s.stale = get(n_.stale);
  s.aging = get(n_.aging);
  s.snapshots = get(n_.snapshots);
  s.not_modified = get(n_.not_modified);
  s.pushes = get(n_.pushes);
  s.pushed_items = get(n_.pushed_items);
  s.gaps = get(n_.gaps);
  s.resyncs = get(n_.resyncs);
  s.resets = get(n_.resets);
  s.expired = get(n_.expired);
  s.compactions = get(n_.compactions);
  s.reconnects = get(n_.reconnects);
  s.evictions = get(n_.evictions);
  absl::MutexLock lock(&mu_);
  s.bytes_held = bytes_;
  s.users_held = lru_.size();
  if (clock_.ref_sent != absl::InfinitePast()) {
    s.staleness = MonotonicTime() - clock_.ref_sent;
  }
  return s;
}

// --- Public face
// --------------------------------------------------------------

absl::Status ValidateFilterReplicaOptions(const FilterReplicaOptions& o) {
  for (auto [name, d] : {std::pair{"max_staleness", o.max_staleness},
                         {"ping_interval", o.ping_interval},
                         {"deadline", o.deadline},
                         {"reconnect_backoff", o.reconnect_backoff}}) {
    if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FilterReplicaOptions.", name, " must be positive and finite, got ",
          absl::FormatDuration(d)));
    }
  }
  if (o.ping_interval >= o.max_staleness) {
    return absl::InvalidArgumentError(
        absl::StrCat("FilterReplicaOptions.ping_interval (",
                     absl::FormatDuration(o.ping_interval),
                     ") must be shorter than max_staleness (",
                     absl::FormatDuration(o.max_staleness),
                     "), or a healthy stream would answer through mode A"));
  }
  if (o.max_bytes < (size_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FilterReplicaOptions.max_bytes must be at least 1 MiB, "
                     "got ",
                     o.max_bytes));
  }
  if (o.compact_after_items < 1) {
    return absl::InvalidArgumentError(
        "FilterReplicaOptions.compact_after_items must be at least 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FilterReplica>> FilterReplica::Connect(
    std::shared_ptr<grpc::ChannelInterface> channel,
    const FilterReplicaOptions& options) {
  if (absl::Status s = ValidateFilterReplicaOptions(options); !s.ok()) {
    return s;
  }
  auto impl = std::make_unique<Impl>(std::move(channel), options);
  impl->Start();
  return std::unique_ptr<FilterReplica>(new FilterReplica(std::move(impl)));
}

FilterReplica::FilterReplica(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

FilterReplica::~FilterReplica() = default;

absl::Status FilterReplica::Check(absl::string_view surface,
                                  absl::string_view user_id,
                                  absl::Span<const uint64_t> ids,
                                  absl::Span<const std::string> keys,
                                  uint8_t* keep, CheckPath* path) {
  return impl_->Check(surface, user_id, ids, keys, keep, path);
}

absl::Status FilterReplica::Sync() { return impl_->Sync(); }

void FilterReplica::Forget(absl::string_view surface,
                           absl::string_view user_id) {
  impl_->Forget(surface, user_id);
}

void FilterReplica::Reconnect() { impl_->Reconnect(); }

FilterReplicaStats FilterReplica::stats() const { return impl_->Stats(); }

}  // namespace exposure_filter
