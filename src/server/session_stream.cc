#include "src/server/session_stream.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpc/slice.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure_filter/owner_hint.h"
#include "src/base/inline_completion_loop.h"
#include "src/base/log_rate_limiter.h"
#include "src/server/request_parser.h"
#include "src/server/request_validation.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;

// A refused request's status in the stream: its field named from the
// request's kind ("subscribe.user_id: empty"), as the unary RPCs name it
// from the message.
v1::SessionResponse ErrorResponse(uint64_t id, absl::string_view kind,
                                  const absl::Status& status) {
  v1::SessionResponse r;
  r.set_request_id(id);
  v1::SessionError* e = r.mutable_error();
  e->set_code(static_cast<int32_t>(status.code()));
  const bool names_field =
      status.code() == absl::StatusCode::kInvalidArgument ||
      status.code() == absl::StatusCode::kFailedPrecondition;
  e->set_message(names_field && !kind.empty()
                     ? absl::StrCat(kind, ".", status.message())
                     : std::string(status.message()));
  if (const auto hint = status.GetPayload(kOwnerHintPayloadUrl);
      hint.has_value()) {
    e->set_owner_hint(std::string(*hint));
  }
  return r;
}

// Surface and user of a subscribe / unsubscribe, checked before anything
// else: the hub's key assumes a valid surface name.
absl::Status ValidateSubject(absl::string_view surface,
                             absl::string_view user_id,
                             const RequestLimits& limits) {
  if (absl::Status s = SurfaceRegistry::ValidateName(surface); !s.ok()) {
    return s;
  }
  return ValidateUserId("user_id", user_id, limits);
}

void LogServerFault(const absl::Status& s) {
  static LogRateLimiter limiter(absl::Seconds(10));
  uint64_t suppressed = 0;
  if (limiter.Allow(&suppressed)) {
    spdlog::warn("event=session_server_error status=\"{}\" suppressed={}",
                 s.ToString(), suppressed);
  }
}

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

constexpr uint32_t kPushTag =
    WireFormatLite::MakeTag(v1::SessionResponse::kPushFieldNumber,
                            WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kPushesTag =
    WireFormatLite::MakeTag(v1::SessionResponse::kPushesFieldNumber,
                            WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kPushesElementTag =
    WireFormatLite::MakeTag(v1::SessionPushes::kPushesFieldNumber,
                            WireFormatLite::WIRETYPE_LENGTH_DELIMITED);

// Where the serialized SessionPush starts in `slices`, a queued
// SessionResponse{push} of `bytes` bytes: past field 3's tag and length,
// its only field (request_id 0 is not serialized). 0 if the message is
// anything else, which SessionHub::Publish never queues: it is then sent
// alone, as queued.
size_t PushOffset(const std::vector<grpc::Slice>& slices, size_t bytes) {
  // A tag and a 32-bit length take at most 5 + 5 bytes.
  uint8_t head[10];
  size_t have = 0;
  for (const grpc::Slice& s : slices) {
    const size_t take = std::min(s.size(), sizeof(head) - have);
    std::memcpy(head + have, s.begin(), take);
    have += take;
    if (have == sizeof(head)) break;
  }
  CodedInputStream in(head, static_cast<int>(have));
  uint32_t length = 0;
  if (in.ReadTag() != kPushTag || !in.ReadVarint32(&length)) return 0;
  const size_t offset = static_cast<size_t>(in.CurrentPosition());
  return offset + length == bytes ? offset : 0;
}

// One SessionResponse{pushes} holding `run`'s pushes in order, built from
// their serialized bytes (wire-format concatenation, no parse): each push
// becomes an element of SessionPushes.pushes (field 1), the whole field 9
// of the response.
grpc::ByteBuffer PushesMessage(const std::vector<grpc::ByteBuffer>& run) {
  std::vector<std::vector<grpc::Slice>> slices(run.size());
  std::vector<size_t> offsets(run.size());
  size_t body = 0;
  for (size_t i = 0; i < run.size(); ++i) {
    // Dump fails only for an empty buffer, which PushOffset refuses.
    (void)run[i].Dump(&slices[i]);
    offsets[i] = PushOffset(slices[i], run[i].Length());
    const uint32_t length = static_cast<uint32_t>(run[i].Length() - offsets[i]);
    body += CodedOutputStream::VarintSize32(kPushesElementTag) +
            CodedOutputStream::VarintSize32(length) + length;
  }
  const size_t total =
      CodedOutputStream::VarintSize32(kPushesTag) +
      CodedOutputStream::VarintSize32(static_cast<uint32_t>(body)) + body;
  grpc_slice out = grpc_slice_malloc(total);
  uint8_t* p = GRPC_SLICE_START_PTR(out);
  p = CodedOutputStream::WriteTagToArray(kPushesTag, p);
  p = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(body), p);
  for (size_t i = 0; i < run.size(); ++i) {
    const uint32_t length = static_cast<uint32_t>(run[i].Length() - offsets[i]);
    p = CodedOutputStream::WriteTagToArray(kPushesElementTag, p);
    p = CodedOutputStream::WriteVarint32ToArray(length, p);
    size_t skip = offsets[i];
    for (const grpc::Slice& s : slices[i]) {
      const size_t from = std::min(skip, s.size());
      skip -= from;
      std::memcpy(p, s.begin() + from, s.size() - from);
      p += s.size() - from;
    }
  }
  grpc::Slice slice(out, grpc::Slice::STEAL_REF);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

SessionStream* SessionStream::Start(SessionHub* hub,
                                    ExposureFilterHandlers* handlers,
                                    AdmissionGate* gate, bool push_batches) {
  auto stream =
      std::make_shared<SessionStream>(hub, handlers, gate, push_batches);
  SessionStream* s = stream.get();
  s->self_ = stream;
  if (absl::Status admit = hub->AdmitStream(stream); !admit.ok()) {
    s->End(grpc::Status(static_cast<grpc::StatusCode>(admit.code()),
                        std::string(admit.message())),
           /*drain=*/false,
           admit.code() == absl::StatusCode::kUnavailable ? EndReason::kShutdown
                                                          : EndReason::kLimit);
    s->Kick();
    return s;
  }
  s->ReadNext();
  return s;
}

SessionStream::SessionStream(SessionHub* hub, ExposureFilterHandlers* handlers,
                             AdmissionGate* gate, bool push_batches)
    : hub_(hub),
      handlers_(handlers),
      gate_(gate),
      push_batches_(push_batches) {}

SessionStream::~SessionStream() = default;

int64_t SessionStream::queued_bytes() const {
  MutexLock lock(&mu_);
  return queue_bytes_;
}

size_t SessionStream::subscription_count() const {
  MutexLock lock(&control_mu_);
  return subs_.size();
}

bool SessionStream::BelowLocked(int divisor) const {
  const SessionOptions& o = hub_->options();
  return queue_bytes_ < o.max_queue_bytes / divisor &&
         static_cast<int64_t>(queue_.size()) < o.max_queue_messages / divisor;
}

// --- Reading ----------------------------------------------------------------

void SessionStream::ReadNext() {
  {
    MutexLock lock(&mu_);
    if (end_requested_ || reads_done_) return;
    // Answers are never dropped, so they are what reading must not outrun:
    // at half the budget the client's requests wait in HTTP/2 flow control.
    if (!BelowLocked(2)) {
      reads_paused_ = true;
      return;
    }
    ++read_starting_;
  }
  StartRead(&read_buf_);
  {
    MutexLock lock(&mu_);
    --read_starting_;
  }
  Kick();  // an End requested meanwhile may finish now
}

void SessionStream::OnReadDone(bool ok) {
  if (!ok) {
    // The client half-closed (or the call is gone): nothing more to push;
    // what is queued is still sent.
    {
      MutexLock lock(&mu_);
      reads_done_ = true;
    }
    UnsubscribeAll();
    End(grpc::Status::OK, /*drain=*/true, EndReason::kClient);
    Kick();
    return;
  }
  v1::SessionRequest request;
  if (absl::Status s = ParseRequest(&read_buf_, &request); !s.ok()) {
    hub_->Bump(SessionHub::Count::kRequestInvalid);
    UnsubscribeAll();
    End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     std::string(s.message())),
        /*drain=*/true, EndReason::kBadRequest);
    Kick();
    return;
  }
  Handle(request);
  ReadNext();
  Kick();
}

void SessionStream::Handle(const v1::SessionRequest& request) {
  const uint64_t id = request.request_id();
  switch (request.kind_case()) {
    case v1::SessionRequest::kSubscribe:
      hub_->Bump(SessionHub::Count::kRequestSubscribe);
      HandleSubscribe(id, request.subscribe());
      return;
    case v1::SessionRequest::kUnsubscribe:
      hub_->Bump(SessionHub::Count::kRequestUnsubscribe);
      HandleUnsubscribe(id, request.unsubscribe());
      return;
    case v1::SessionRequest::kFilter:
      hub_->Bump(SessionHub::Count::kRequestFilter);
      HandleFilter(id, request.filter());
      return;
    case v1::SessionRequest::kPing:
      hub_->Bump(SessionHub::Count::kRequestPing);
      HandlePing(id);
      return;
    case v1::SessionRequest::KIND_NOT_SET:
      break;
  }
  hub_->Bump(SessionHub::Count::kRequestInvalid);
  EnqueueError(id, "",
               absl::InvalidArgumentError("request: none of subscribe, "
                                          "unsubscribe, filter, ping is set"));
}

void SessionStream::HandleSubscribe(uint64_t id,
                                    const v1::SessionSubscribe& request) {
  if (absl::Status s = ValidateSubject(request.surface(), request.user_id(),
                                       handlers_->limits());
      !s.ok()) {
    EnqueueError(id, "subscribe", s);
    return;
  }
  std::string key = SessionHub::Key(request.surface(), request.user_id());
  MutexLock control(&control_mu_);
  auto it = subs_.find(key);
  std::unique_ptr<SessionSubscription> fresh;
  SessionSubscription* sub = nullptr;
  if (it != subs_.end()) {
    sub = it->second.get();  // renew, compact or resync: a new snapshot
  } else {
    const int64_t limit = hub_->options().max_subscriptions_per_stream;
    if (static_cast<int64_t>(subs_.size()) >= limit) {
      EnqueueError(
          id, "",
          absl::ResourceExhaustedError(absl::StrCat(
              "subscribe: this stream holds ", subs_.size(),
              " subscriptions, the most "
              "--session_max_subscriptions_per_stream allows; unsubscribe "
              "users it no longer needs, or open another stream")));
      return;
    }
    if (absl::Status s = hub_->ReserveSubscription(); !s.ok()) {
      EnqueueError(id, "", s);
      return;
    }
    fresh = std::make_unique<SessionSubscription>(this, key, request.surface(),
                                                  request.user_id());
    sub = fresh.get();
  }
  bool queued = false;
  if (absl::Status s =
          TakeSnapshot(sub, id, request.if_version(), &request, &queued);
      !s.ok()) {
    if (fresh != nullptr) hub_->ReleaseSubscription();
    EnqueueError(id, "subscribe", s);
    return;
  }
  sub->last_used_ms = handlers_->clock().MonotonicMs();
  if (fresh != nullptr) subs_.emplace(std::move(key), std::move(fresh));
}

absl::Status SessionStream::TakeSnapshot(SessionSubscription* sub, uint64_t id,
                                         const std::string& if_version,
                                         const v1::SessionSubscribe* request,
                                         bool* queued) {
  *queued = false;
  v1::GetFilterRequest req;
  req.set_surface(sub->surface);
  req.set_user_id(sub->user_id);
  req.set_if_version(if_version);
  if (request != nullptr) {
    *req.mutable_accepted_formats() = request->accepted_formats();
  }
  const int64_t lease_ms =
      absl::ToInt64Milliseconds(hub_->options().subscription_idle_timeout);
  return handlers_->PullForSession(
      req, [&](FilterPull& pull, const FilterPolicy& policy) {
        // Still under the user's shard lock: registered and queued before
        // any later write can apply (subscribe, then snapshot).
        const uint64_t sequence = hub_->Register(sub);
        v1::SessionResponse response;
        response.set_request_id(id);
        v1::SessionSnapshot* snap = response.mutable_snapshot();
        snap->set_surface(sub->surface);
        snap->set_user_id(sub->user_id);
        snap->set_sequence(sequence);
        snap->set_not_modified(pull.not_modified);
        snap->set_version(std::move(pull.version));
        *snap->mutable_filter() = std::move(pull.bytes);
        snap->set_server_time_ms(pull.now_ms);
        snap->set_retention_ms(policy.retention_ms());
        snap->set_slice_span_ms(policy.slice_span_ms());
        snap->set_fp_rate(policy.fp_rate());
        snap->set_idle_timeout_ms(lease_ms);
        grpc::ByteBuffer message;
        if (absl::Status s = SerializeResponse(response, &message); !s.ok()) {
          LogServerFault(s);
          return;
        }
        const size_t bytes = message.Length();
        const bool not_modified = pull.not_modified;
        MutexLock lock(&mu_);
        if (end_requested_) return;
        // A snapshot that does not fit waits for room (the subscription is
        // not synced until it is sent); alone in the queue it always fits.
        const SessionOptions& o = hub_->options();
        const bool fits =
            queue_.empty() ||
            (queue_bytes_ + static_cast<int64_t>(bytes) <= o.max_queue_bytes &&
             static_cast<int64_t>(queue_.size()) < o.max_queue_messages);
        if (!fits) {
          pending_.push_back(sub->key);
          sub->snapshot_bytes_hint = static_cast<int64_t>(bytes);
          // A synced subscription (a renewal or compaction) stays synced
          // meanwhile, but the client still waits for this snapshot.
          sub->snapshot_owed = true;
          return;
        }
        queue_.push_back(Queued{std::move(message), bytes, Kind::kSnapshot});
        queue_bytes_ += static_cast<int64_t>(bytes);
        hub_->AddQueueBytes(static_cast<int64_t>(bytes));
        NoteQueueLocked();
        sub->synced_generation = generation_;
        sub->snapshot_owed = false;
        *queued = true;
        // The last snapshot a resync owed is queued: the resync is complete
        // here, under the lock a push takes, not when SnapshotPending looks
        // again. A push that lands behind this snapshot and overflows is a
        // new resync; with the flag still set for that moment it would end
        // the stream instead, by how the threads happened to interleave.
        if (resync_in_progress_ && !resync_all_ && pending_.empty()) {
          resync_in_progress_ = false;
        }
        hub_->Bump(not_modified ? SessionHub::Count::kSnapshotNotModified
                                : SessionHub::Count::kSnapshotFull);
      });
}

void SessionStream::HandleUnsubscribe(uint64_t id,
                                      const v1::SessionUnsubscribe& request) {
  if (absl::Status s = ValidateSubject(request.surface(), request.user_id(),
                                       handlers_->limits());
      !s.ok()) {
    EnqueueError(id, "unsubscribe", s);
    return;
  }
  v1::SessionResponse response;
  response.set_request_id(id);
  v1::SessionUnsubscribed* u = response.mutable_unsubscribed();
  u->set_surface(request.surface());
  u->set_user_id(request.user_id());
  u->set_reason(v1::SessionUnsubscribed::REQUESTED);
  // A quiet unsubscribe is not answered (the proto's SessionUnsubscribe).
  const bool answer = !request.quiet();
  MutexLock control(&control_mu_);
  auto it = subs_.find(SessionHub::Key(request.surface(), request.user_id()));
  if (it == subs_.end()) {
    if (answer) EnqueueAnswer(response);
    return;
  }
  hub_->Unregister(it->second.get(), [&] {
    if (answer) EnqueueAnswer(response);
  });
  hub_->ReleaseSubscription();
  subs_.erase(it);
}

void SessionStream::HandleFilter(uint64_t id,
                                 const v1::FilterRecalledRequest& request) {
  // Admitted as the unary FilterRecalled is: a flood of mode-A requests on
  // streams is bounded by the same limits.
  const uint64_t request_bytes = request.ByteSizeLong();
  if (gate_ != nullptr) {
    if (absl::Status admit = gate_->Admit(request_bytes); !admit.ok()) {
      EnqueueError(id, "", admit);
      return;
    }
  }
  v1::SessionResponse response;
  response.set_request_id(id);
  const absl::Status s =
      handlers_->FilterRecalled(request, response.mutable_filter());
  if (gate_ != nullptr) gate_->Release(request_bytes);
  if (!s.ok()) {
    EnqueueError(id, "filter", s);
    return;
  }
  EnqueueAnswer(response);
  // A mode-A request renews the user's lease: the client is using it.
  const std::string key = SessionHub::Key(request.surface(), request.user_id());
  MutexLock control(&control_mu_);
  auto it = subs_.find(key);
  if (it != subs_.end()) {
    it->second->last_used_ms = handlers_->clock().MonotonicMs();
  }
}

void SessionStream::HandlePing(uint64_t id) {
  v1::SessionResponse response;
  response.set_request_id(id);
  v1::SessionPong* pong = response.mutable_pong();
  pong->set_server_time_ms(handlers_->clock().NowMs());
  pong->set_lagging(!handlers_->ServingFresh());
  EnqueueAnswer(response);
}

void SessionStream::UnsubscribeAll() {
  MutexLock control(&control_mu_);
  for (auto& [key, sub] : subs_) {
    hub_->Unregister(sub.get(), [] {});
    hub_->ReleaseSubscription();
  }
  subs_.clear();
}

// --- Queueing ---------------------------------------------------------------

void SessionStream::EnqueueAnswer(const v1::SessionResponse& response) {
  grpc::ByteBuffer message;
  if (absl::Status s = SerializeResponse(response, &message); !s.ok()) {
    LogServerFault(s);
    return;
  }
  const size_t bytes = message.Length();
  MutexLock lock(&mu_);
  if (end_requested_) return;
  queue_.push_back(Queued{std::move(message), bytes, Kind::kAnswer});
  queue_bytes_ += static_cast<int64_t>(bytes);
  hub_->AddQueueBytes(static_cast<int64_t>(bytes));
  NoteQueueLocked();
}

void SessionStream::EnqueueError(uint64_t id, absl::string_view kind,
                                 const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInternal ||
      status.code() == absl::StatusCode::kUnknown ||
      status.code() == absl::StatusCode::kDataLoss) {
    LogServerFault(status);
  }
  EnqueueAnswer(ErrorResponse(id, kind, status));
}

bool SessionStream::EnqueuePush(SessionSubscription* sub,
                                const grpc::ByteBuffer& message, size_t bytes,
                                size_t items) {
  MutexLock lock(&mu_);
  if (end_requested_) return false;
  if (sub->synced_generation != generation_) {
    // Awaiting a snapshot, which is taken under the user's lock after this
    // write and so holds it.
    hub_->Bump(SessionHub::Count::kPushDropped);
    return false;
  }
  const SessionOptions& o = hub_->options();
  if (!queue_.empty() &&
      (queue_bytes_ + static_cast<int64_t>(bytes) > o.max_queue_bytes ||
       static_cast<int64_t>(queue_.size()) >= o.max_queue_messages)) {
    OverflowLocked();
    return true;
  }
  queue_.push_back(Queued{message, bytes, Kind::kPush});
  queue_bytes_ += static_cast<int64_t>(bytes);
  hub_->AddQueueBytes(static_cast<int64_t>(bytes));
  NoteQueueLocked();
  hub_->Bump(SessionHub::Count::kPush);
  hub_->AddPushedItems(items);
  return !writing_;
}

void SessionStream::OverflowLocked() {
  if (resync_in_progress_) {
    // It overflowed again before the last resync could complete: the
    // client reads slower than its subscriptions change.
    EndLocked(
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     "session: the client reads slower than its subscriptions' "
                     "pushes arrive (the stream's queue overflowed "
                     "--session_max_queue_bytes / --session_max_queue_messages "
                     "again before its resync completed); subscribe to fewer "
                     "users per stream or open more streams"),
        /*drain=*/false, EndReason::kOverflow);
    return;
  }
  hub_->Bump(SessionHub::Count::kResync);
  // Every subscription stops being synced at once; pushes and snapshots
  // still queued are covered by the snapshots the resync sends, so they
  // go (a snapshot left behind the notice would claim a sync the server no
  // longer keeps). Answers stay.
  ++generation_;
  std::deque<Queued> kept;
  int64_t kept_bytes = 0;
  for (Queued& q : queue_) {
    if (q.kind == Kind::kAnswer) {
      kept_bytes += static_cast<int64_t>(q.bytes);
      kept.push_back(std::move(q));
    }
  }
  hub_->AddQueueBytes(kept_bytes - queue_bytes_);
  queue_ = std::move(kept);
  queue_bytes_ = kept_bytes;
  // The notice goes ahead of everything left, pongs included: a pong
  // behind it must not vouch for pushes that were dropped.
  v1::SessionResponse notice;
  notice.mutable_resync()->set_reason(v1::SessionResync::QUEUE_FULL);
  grpc::ByteBuffer message;
  if (SerializeResponse(notice, &message).ok()) {
    const size_t bytes = message.Length();
    queue_.push_front(Queued{std::move(message), bytes, Kind::kAnswer});
    queue_bytes_ += static_cast<int64_t>(bytes);
    hub_->AddQueueBytes(static_cast<int64_t>(bytes));
    NoteQueueLocked();
  }
  resync_in_progress_ = true;
  resync_all_ = true;
}

void SessionStream::SnapshotPending() {
  MutexLock control(&control_mu_);
  while (true) {
    std::string key;
    {
      MutexLock lock(&mu_);
      if (end_requested_) return;
      if (resync_all_) {
        resync_all_ = false;
        pending_.clear();
        for (const auto& [k, sub] : subs_) pending_.push_back(k);
      }
      if (pending_.empty()) {
        resync_in_progress_ = false;
        return;
      }
      if (!BelowLocked(2)) return;  // the next write's completion resumes
      key = std::move(pending_.front());
      pending_.pop_front();
    }
    auto it = subs_.find(key);
    if (it == subs_.end()) continue;  // unsubscribed meanwhile
    SessionSubscription* sub = it->second.get();
    {
      MutexLock lock(&mu_);
      if (sub->synced_generation == generation_ && !sub->snapshot_owed) {
        continue;
      }
      // Known not to fit yet: do not encode it again for nothing.
      if (!queue_.empty() && queue_bytes_ + sub->snapshot_bytes_hint >
                                 hub_->options().max_queue_bytes) {
        pending_.push_front(std::move(key));
        return;
      }
    }
    bool queued = false;
    if (absl::Status s = TakeSnapshot(sub, /*id=*/0, "", nullptr, &queued);
        !s.ok()) {
      // E.g. a replicated copy not serving: the client answers through
      // mode A meanwhile (and is refused there too, so it fails over);
      // retried by the next tick.
      MutexLock lock(&mu_);
      pending_.push_front(std::move(key));
      return;
    }
    // Too big for what is queued (TakeSnapshot put it back in line): it
    // goes once the queue has drained, alone if need be.
    if (!queued) return;
  }
}

void SessionStream::Tick(int64_t now_monotonic_ms) {
  const int64_t lease_ms =
      absl::ToInt64Milliseconds(hub_->options().subscription_idle_timeout);
  {
    MutexLock control(&control_mu_);
    for (auto it = subs_.begin(); it != subs_.end();) {
      SessionSubscription* sub = it->second.get();
      if (now_monotonic_ms - sub->last_used_ms < lease_ms) {
        ++it;
        continue;
      }
      v1::SessionResponse notice;
      v1::SessionUnsubscribed* u = notice.mutable_unsubscribed();
      u->set_surface(sub->surface);
      u->set_user_id(sub->user_id);
      u->set_reason(v1::SessionUnsubscribed::IDLE);
      // Queued under the hub lock: a write after the expiry is not pushed,
      // and the notice is ahead of any pong that follows it.
      hub_->Unregister(sub, [&] { EnqueueAnswer(notice); });
      hub_->ReleaseSubscription();
      hub_->Bump(SessionHub::Count::kExpired);
      subs_.erase(it++);
    }
  }
  // Retry snapshots only on a stream that is draining: with a write stuck
  // (the client is not reading) a snapshot would only sit in the queue
  // and, once its subscription is synced again, let pushes refill it.
  bool pending = false;
  {
    MutexLock lock(&mu_);
    pending = (!pending_.empty() || resync_all_) && !writing_ &&
              queue_.empty() && !end_requested_;
  }
  if (pending) SnapshotPending();
  Kick();
}

// --- Writing and ending
// -------------------------------------------------------

void SessionStream::Kick() {
  RunAsLoop(this, [this] { KickOnce(); });
}

bool SessionStream::TakePushRunLocked(std::vector<grpc::ByteBuffer>* run) {
  if (!push_batches_ || queue_.size() < 2) return false;
  size_t n = 0;
  size_t bytes = 0;
  std::vector<grpc::Slice> slices;
  // Only the pushes directly at the front: a snapshot, answer or resync
  // notice ends the run, so nothing is reordered.
  while (n < queue_.size() && n < kMaxBatchPushes) {
    const Queued& q = queue_[n];
    if (q.kind != Kind::kPush || bytes + q.bytes > kMaxBatchBytes) break;
    slices.clear();
    if (!q.message.Dump(&slices).ok() || PushOffset(slices, q.bytes) == 0) {
      break;
    }
    bytes += q.bytes;
    ++n;
  }
  if (n < 2) return false;
  run->reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Queued& q = queue_.front();
    run->push_back(std::move(q.message));
    queue_.pop_front();
  }
  queue_bytes_ -= static_cast<int64_t>(bytes);
  hub_->AddQueueBytes(-static_cast<int64_t>(bytes));
  return true;
}

void SessionStream::KickOnce() {
  bool finish = false;
  grpc::Status status;
  std::vector<grpc::ByteBuffer> run;
  {
    MutexLock lock(&mu_);
    if (done_ || finished_ || writing_) return;
    if (TakePushRunLocked(&run)) {
      hub_->Bump(SessionHub::Count::kPushBatch);
      hub_->Bump(SessionHub::Count::kPushBatched, run.size());
      writing_ = true;
    } else if (!queue_.empty()) {
      Queued& next = queue_.front();
      write_buf_ = std::move(next.message);
      queue_bytes_ -= static_cast<int64_t>(next.bytes);
      hub_->AddQueueBytes(-static_cast<int64_t>(next.bytes));
      queue_.pop_front();
      writing_ = true;
    } else if (end_requested_ && read_starting_ == 0) {
      // Nothing in flight and no read being started: Finish is the last
      // operation this call sees.
      finished_ = true;
      finish = true;
      status = end_status_;
    } else {
      return;
    }
  }
  if (finish) {
    Finish(status);
    return;
  }
  // Built outside the lock, so the apply path's EnqueuePush does not wait
  // on the copy; write_buf_ is this kick's alone while writing_ is set.
  if (!run.empty()) write_buf_ = PushesMessage(run);
  StartWrite(&write_buf_);
}

void SessionStream::OnWriteDone(bool ok) {
  bool resume_reads = false;
  bool snapshots = false;
  {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The call is broken (cancelled, connection gone): nothing more can
      // be sent.
      EndLocked(grpc::Status(grpc::StatusCode::CANCELLED,
                             "session: the stream broke"),
                /*drain=*/false, EndReason::kClient);
    } else if (!end_requested_) {
      resume_reads = reads_paused_ && BelowLocked(4);
      if (resume_reads) reads_paused_ = false;
      snapshots = (resync_all_ || !pending_.empty()) && BelowLocked(2);
    }
  }
  if (resume_reads) ReadNext();
  if (snapshots) SnapshotPending();
  Kick();
}

void SessionStream::End(const grpc::Status& status, bool drain,
                        EndReason reason) {
  MutexLock lock(&mu_);
  EndLocked(status, drain, reason);
}

void SessionStream::EndLocked(const grpc::Status& status, bool drain,
                              EndReason reason) {
  if (end_requested_) return;
  end_requested_ = true;
  end_status_ = status;
  drain_ = drain;
  if (!drain) ClearQueueLocked();
  switch (reason) {
    case EndReason::kClient:
      hub_->Bump(SessionHub::Count::kEndedClient);
      break;
    case EndReason::kOverflow:
      hub_->Bump(SessionHub::Count::kEndedOverflow);
      break;
    case EndReason::kShutdown:
      hub_->Bump(SessionHub::Count::kEndedShutdown);
      break;
    case EndReason::kLimit:
      hub_->Bump(SessionHub::Count::kEndedLimit);
      break;
    case EndReason::kBadRequest:
      hub_->Bump(SessionHub::Count::kEndedBadRequest);
      break;
  }
}

void SessionStream::ClearQueueLocked() {
  hub_->AddQueueBytes(-queue_bytes_);
  queue_.clear();
  queue_bytes_ = 0;
}

void SessionStream::NoteQueueLocked() {
  hub_->NoteStreamQueue(queue_bytes_, static_cast<int64_t>(queue_.size()));
}

void SessionStream::OnCancel() {
  End(grpc::Status(grpc::StatusCode::CANCELLED, "session: cancelled"),
      /*drain=*/false, EndReason::kClient);
  Kick();
}

void SessionStream::OnDone() {
  UnsubscribeAll();
  {
    MutexLock lock(&mu_);
    done_ = true;
    ClearQueueLocked();
  }
  // The hub's and our own references go last: this may be freed here.
  std::shared_ptr<SessionStream> self = std::move(self_);
  hub_->RemoveStream(this);
}

}  // namespace exposure_filter
