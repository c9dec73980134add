// FilterReplica: the checks (local, mode A on the stream, the unary call)
// and the public face.
#include "exposure_filter/filter_replica.h"

#include "src/client/filter_replica_impl.h"

namespace exposure_filter {

namespace v1 = exposure::v1;
using filter_replica_internal::Entry;
using filter_replica_internal::EntryKey;
using filter_replica_internal::PendingFilter;
using filter_replica_internal::ServerClock;
using filter_replica_internal::UnpackMask;

// --- Checks
// -------------------------------------------------------------------

bool FilterReplica::Impl::FreshLocked(absl::Time now) const {
  return call_ != nullptr && !call_->ended() && !clock_.lagging &&
         clock_.ref_sent >= now - options_.max_staleness;
}

bool FilterReplica::Impl::Serving() const {
  absl::MutexLock lock(&mu_);
  return call_ != nullptr && !call_->ended() && !clock_.lagging &&
         clock_.ref_sent >= MonotonicTime() - Silence();
}

std::shared_ptr<const PulledFilter> FilterReplica::Impl::Release(
    absl::string_view surface, absl::string_view user_id) {
  std::shared_ptr<Entry> e = Find(surface, user_id);
  if (e == nullptr) return nullptr;
  std::shared_ptr<const PulledFilter> filter;
  {
    absl::MutexLock lock(&e->mu);
    filter = e->filter;
  }
  Forget(surface, user_id);
  return filter;
}

absl::Status FilterReplica::Impl::Check(absl::string_view surface,
                                        absl::string_view user_id,
                                        absl::Span<const uint64_t> ids,
                                        absl::Span<const std::string> keys,
                                        uint8_t* keep, CheckPath* path) {
  if (TryLocal(surface, user_id, ids, keys, keep, absl::InfinitePast(),
               nullptr)) {
    if (path != nullptr) *path = CheckPath::kLocal;
    return absl::OkStatus();
  }
  absl::Status s = ModeA(surface, user_id, ids, keys, keep, path);
  if (!s.ok()) n_.failed.fetch_add(1, std::memory_order_relaxed);
  return s;
}

bool FilterReplica::Impl::TryLocal(absl::string_view surface,
                                   absl::string_view user_id,
                                   absl::Span<const uint64_t> ids,
                                   absl::Span<const std::string> keys,
                                   uint8_t* keep, absl::Time fresh_since,
                                   std::shared_ptr<const PulledFilter> seed) {
  const size_t n = ids.size() + keys.size();
  const std::string key = EntryKey(surface, user_id);
  std::shared_ptr<Entry> e = GetOrCreate(key, surface, user_id);
  std::shared_ptr<SessionCall> call = CurrentCall(/*live_only=*/true);
  // absl waits take wall-clock deadlines.
  const absl::Time deadline = absl::Now() + options_.deadline;
  bool first = false;
  {
    absl::MutexLock lock(&e->mu);
    if (seed != nullptr && e->filter == nullptr && !e->subscribed) {
      // Another owner's snapshot: not trusted here (synced stays false),
      // only offered as if_version. The same version on this owner's copy
      // is the same bytes (the version is their checksum).
      e->filter = std::move(seed);
      e->version = e->filter->version();
      SetView(e.get(), e->filter->view());
    }
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
    fresh = FreshLocked(MonotonicTime()) && clock_.ref_sent >= fresh_since;
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
        if (std::shared_ptr<const ClaimIndex> index = IndexFor(e, n)) {
          e->view.KeepMaskHashes(absl::MakeConstSpan(hashes.data(), n), keep,
                                 *index);
          n_.indexed.fetch_add(1, std::memory_order_relaxed);
        } else {
          e->view.KeepMaskHashes(absl::MakeConstSpan(hashes.data(), n), keep);
        }
        if (!e->pushed.empty()) e->RemovePushed(hashes.data(), n, keep);
        n_.local.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
    }
  }
  return false;
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

bool FilterReplica::CheckLocal(absl::string_view surface,
                               absl::string_view user_id,
                               absl::Span<const uint64_t> ids,
                               absl::Span<const std::string> keys,
                               uint8_t* keep, absl::Time fresh_since,
                               std::shared_ptr<const PulledFilter> seed) {
  return impl_->TryLocal(surface, user_id, ids, keys, keep, fresh_since,
                         std::move(seed));
}

bool FilterReplica::Serving() const { return impl_->Serving(); }

std::shared_ptr<const PulledFilter> FilterReplica::Release(
    absl::string_view surface, absl::string_view user_id) {
  return impl_->Release(surface, user_id);
}

absl::Status FilterReplica::Sync() { return impl_->Sync(); }

void FilterReplica::Forget(absl::string_view surface,
                           absl::string_view user_id) {
  impl_->Forget(surface, user_id);
}

void FilterReplica::NoteShown(absl::string_view surface,
                              absl::string_view user_id,
                              absl::Span<const uint64_t> ids) {
  impl_->NoteShown(surface, user_id, ids);
}

void FilterReplica::Reconnect() { impl_->Reconnect(); }

FilterReplicaStats FilterReplica::stats() const { return impl_->Stats(); }

}  // namespace exposure_filter
