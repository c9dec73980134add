// FilterReplica: the copies held (subscribe, ping, age, account, evict,
// forget) and the stats.
#include <algorithm>

#include "src/client/filter_replica_impl.h"

namespace exposure_filter {

namespace v1 = exposure::v1;
using filter_replica_internal::Entry;
using filter_replica_internal::EntryKey;
using filter_replica_internal::kEntryOverheadBytes;
using filter_replica_internal::kNever;
using filter_replica_internal::kPushedItemBytes;

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
  bool fresh_for_a_while = false;
  {
    absl::MutexLock lock(&mu_);
    // Forgotten or evicted since the caller found it (its lock was not
    // held then): no subscribe for a user not held, whose answer would
    // find no entry and leave the id behind. The caller's check goes to
    // mode A.
    auto held = entries_.find(EntryKey(e->surface, e->user_id));
    if (held == entries_.end() || *held->second != e) return;
    subscribes_.erase(e->subscribe_id);
    subscribes_[id] = e;
    fresh_for_a_while =
        FreshLocked(MonotonicTime() + options_.max_staleness / 2);
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
  // A ping right behind it, whose pong arrives just after the snapshot
  // and makes the first check fresh without waiting for the pinger; not
  // needed while the last pong keeps the stream fresh for another half
  // bound (the pinger renews it every ping_interval): a feed session's
  // subscribe then costs one message each way fewer.
  if (!fresh_for_a_while) SendPing(call);
}

uint64_t FilterReplica::Impl::SendPing(SessionCall* call, bool wait) {
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
  if (!(wait ? call->Send(r) : call->TrySend(r))) {
    absl::MutexLock lock(&mu_);
    pings_.erase(id);
    return 0;
  }
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
  SetView(e, e->view.WithSlicesEndingAfter(cutoff));
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
    DropIndexLocked(victim.get());
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
    const bool subscribed = victim->subscribed;
    victim->subscribed = false;
    // A check waiting for the user's first snapshot stops waiting: no
    // snapshot will be applied to a user not held, so it answers through
    // mode A now, not at its deadline.
    victim->cv.SignalAll();
    if (victim->subscribe_id != 0) {
      // A subscribe still unanswered: its answer will find no entry, so
      // nothing else would take its id off the map while the stream lasts.
      absl::MutexLock lock2(&mu_);
      subscribes_.erase(victim->subscribe_id);
      victim->subscribe_id = 0;
    }
    if (!subscribed || call == nullptr) continue;
    v1::SessionRequest r;
    r.set_request_id(next_id_.fetch_add(1, std::memory_order_relaxed));
    r.mutable_unsubscribe()->set_surface(victim->surface);
    r.mutable_unsubscribe()->set_user_id(victim->user_id);
    // No answer wanted: pushes of a user not held are dropped anyway. Nor
    // is it urgent: it rides with the next request (a feed's next
    // subscribe, or the pinger's ping within ping_interval), one write
    // fewer per forgotten user.
    r.mutable_unsubscribe()->set_quiet(true);
    call->SendBuffered(std::move(r));
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
    DropIndexLocked(e.get());
    lru_.erase(it->second);
    entries_.erase(it);
    victims.push_back(std::move(e));
  }
  Drop(victims);
}

// --- Filed runs
// ---------------------------------------------------------------

void FilterReplica::Impl::SetView(Entry* e, FilterView view) {
  e->view = std::move(view);
  e->view_checks = 0;
  absl::MutexLock lock(&mu_);
  DropIndexLocked(e);
}

std::shared_ptr<const ClaimIndex> FilterReplica::Impl::IndexFor(
    const std::shared_ptr<Entry>& e, size_t candidates) {
  {
    absl::MutexLock lock(&mu_);
    if (e->indexed) {
      indexes_.splice(indexes_.begin(), indexes_, e->index_slot);
      return e->index_slot->index;
    }
  }
  // A user checked once (a one-request session) is not worth its index:
  // filing costs about what the check without it costs.
  // view_checks < 0: FileRuns declined this view (not worth it, or
  // refused) or its index exceeds the bound; not tried again until the
  // view is replaced (SetView).
  if (options_.max_index_bytes == 0 || e->view_checks < 0 ||
      ++e->view_checks < 2) {
    return nullptr;
  }
  auto index = std::make_shared<ClaimIndex>();
  if (!e->view.FileRuns(index.get(), candidates)) {
    e->view_checks = -1;
    return nullptr;
  }
  const size_t bytes = index->retained_bytes();
  if (bytes > options_.max_index_bytes) {
    // Larger than the whole bound: used once, not kept, and not filed
    // again for this view (each later check would pay the filing for
    // nothing).
    e->view_checks = -1;
    return index;
  }
  absl::MutexLock lock(&mu_);
  // Forgotten or evicted since the check began: used once, not kept (no
  // removal would take its slot back).
  auto it = entries_.find(EntryKey(e->surface, e->user_id));
  if (it == entries_.end() || *it->second != e) return index;
  // e->mu is held: nothing else filed e's view meanwhile.
  indexes_.push_front(IndexSlot{index, bytes, e});
  e->index_slot = indexes_.begin();
  e->indexed = true;
  index_bytes_ += bytes;
  while (index_bytes_ > options_.max_index_bytes) {
    // Least recently used first. Its entry's flag is guarded by mu_ (held),
    // so no entry lock is needed; a check probing it keeps its reference.
    IndexSlot& victim = indexes_.back();
    if (std::shared_ptr<Entry> owner = victim.entry.lock()) {
      owner->indexed = false;
    }
    index_bytes_ -= victim.bytes;
    indexes_.pop_back();
  }
  return index;
}

void FilterReplica::Impl::DropIndexLocked(Entry* e) {
  if (!e->indexed) return;
  index_bytes_ -= e->index_slot->bytes;
  indexes_.erase(e->index_slot);
  e->indexed = false;
}

void FilterReplica::Impl::NoteShown(absl::string_view surface,
                                    absl::string_view user_id,
                                    absl::Span<const uint64_t> ids) {
  std::shared_ptr<Entry> e = Find(surface, user_id);
  if (e == nullptr || ids.empty()) return;
  // The slice the server will file the write in: its clock now, as far as
  // the last pong tells (read before the entry's lock: lock order).
  int64_t server_now_ms = 0;
  {
    absl::MutexLock lock(&mu_);
    server_now_ms = clock_.seen_ms;
    if (clock_.ref_sent != absl::InfinitePast()) {
      server_now_ms = std::max(
          server_now_ms,
          clock_.ref_ms +
              absl::ToInt64Milliseconds(MonotonicTime() - clock_.ref_sent));
    }
  }
  thread_local std::vector<uint64_t> hashes;
  hashes.resize(ids.size());
  HashItemIds(ids.data(), ids.size(), hashes.data());
  {
    absl::MutexLock lock(&e->mu);
    if (!e->synced) return;
    const int64_t slice = server_now_ms / e->span_ms;
    for (uint64_t h : hashes) e->AddPushed(h, slice);
    e->next_expiry_ms =
        std::min(e->next_expiry_ms, (slice + 1) * e->span_ms + e->retention_ms);
  }
  n_.noted_items.fetch_add(ids.size(), std::memory_order_relaxed);
  Account(e);
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
  s.noted_items = get(n_.noted_items);
  s.gaps = get(n_.gaps);
  s.resyncs = get(n_.resyncs);
  s.resets = get(n_.resets);
  s.expired = get(n_.expired);
  s.compactions = get(n_.compactions);
  s.reconnects = get(n_.reconnects);
  s.evictions = get(n_.evictions);
  s.indexed_checks = get(n_.indexed);
  absl::MutexLock lock(&mu_);
  s.bytes_held = bytes_;
  s.index_bytes = index_bytes_;
  s.users_held = lru_.size();
  s.subscribes_in_flight = subscribes_.size();
  if (clock_.ref_sent != absl::InfinitePast()) {
    s.staleness = MonotonicTime() - clock_.ref_sent;
  }
  return s;
}

}  // namespace exposure_filter
