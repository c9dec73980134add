// FilterReplica: what the stream brings (snapshots, pushes, pongs, refusals,
// resyncs), its end and reconnection.
#include <algorithm>

#include "src/client/filter_replica_impl.h"

namespace exposure_filter {

namespace v1 = exposure::v1;
using filter_replica_internal::Entry;
using filter_replica_internal::FromProto;
using filter_replica_internal::PendingFilter;

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
    case v1::SessionResponse::kPushes:
      // Exactly its pushes in order, each checked for a gap on its own.
      for (const v1::SessionPush& p : r.pushes().pushes()) OnPush(p);
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
    SetView(e.get(), e->filter->view());
    e->ClearPushed();
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
      SetView(e.get(), FilterView());
      e->ClearPushed();
      UpdateExpiry(e.get());
      account = true;
    } else {
      n_.pushed_items.fetch_add(p.item_hashes_size(),
                                std::memory_order_relaxed);
      const int64_t slice = p.event_time_ms() / e->span_ms;
      for (uint64_t h : p.item_hashes()) e->AddPushed(h, slice);
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
      for (const auto& [id, sent] : pings_) {
        if (now - sent > Silence()) reconnect = true;
      }
      // A write held that long: the server stopped reading (its window is
      // full) without ending the stream. Cancelling releases the writer.
      if (call != nullptr && call->WriteBlockedFor() > Silence()) {
        reconnect = true;
      }
      // Nothing to keep fresh (unless a router needs to know the server
      // answers, or a held-back unsubscribe waits for a write to carry it).
      if (lru_.empty() && !options_.ping_when_idle &&
          (call == nullptr || !call->holds_buffered())) {
        call = nullptr;
      }
    }
    if (reconnect) {
      Reconnect();
    } else if (call != nullptr && !call->ended()) {
      SendPing(call.get(), /*wait=*/false);
    }
  }
}

}  // namespace exposure_filter
