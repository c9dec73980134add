// SessionStream: one Session RPC (docs/session-stream.md), a callback-API
// bidirectional reactor that never blocks a gRPC thread: requests are
// handled inline as they are read (short shard locks, as the unary RPCs),
// and everything sent goes through a bounded queue drained one write at a
// time.
//
// The queue (bytes and messages, --session_max_queue_*) is the stream's
// whole claim on server memory beyond its subscriptions: answers pause
// reading at half of it (HTTP/2 flow control then holds the client's
// requests), and a push that would overflow it makes the stream drop every
// queued push and snapshot, queue a resync notice ahead of what is left,
// and re-snapshot each subscription as the client reads again. A second
// overflow before that resync has completed ends the stream
// RESOURCE_EXHAUSTED.
//
// A stream whose client opted in (the call metadata of
// exposure_filter/session_push_batches.h) gets the pushes queued back to
// back as one SessionResponse{pushes} per write, up to a bound: one
// message, one sendmsg and one read on the client for the run instead of
// one each. The queue itself is the same; only its draining differs.
//
// Lifetime: the stream owns itself (a shared_ptr to itself) until gRPC
// calls OnDone; the hub and the apply path's kick lists hold shared_ptrs,
// so a late kick finds a finished stream, never freed memory. Finish is
// called only when no write is in flight and no read is being started, so
// no operation is ever started after it.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SESSION_STREAM_H_
#define EXPOSURE_FILTER_SRC_SERVER_SESSION_STREAM_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "src/server/admission_gate.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/server/session_hub.h"
#include "src/store/annotated_mutex.h"

namespace exposure_filter {

class SessionStream;

// A stream's interest in one (surface, user). Owned by its stream, listed
// by the hub while registered.
struct SessionSubscription {
  SessionSubscription(SessionStream* s, std::string k, std::string surf,
                      std::string user)
      : stream(s),
        key(std::move(k)),
        surface(std::move(surf)),
        user_id(std::move(user)) {}
  SessionStream* const stream;
  const std::string key;  // SessionHub::Key
  const std::string surface;
  const std::string user_id;
  // The stream's sync generation when its last snapshot was queued; the
  // subscription is synced (its pushes are queued) while this equals the
  // stream's generation. 0: never snapshotted.
  uint64_t synced_generation = 0;  // guarded by stream's queue lock
  // Bytes of the last snapshot that did not fit the queue, so a pending
  // one is not encoded again until it can (guarded by the queue lock).
  int64_t snapshot_bytes_hint = 0;
  // A snapshot the client asked for did not fit the queue and is still to
  // be sent (guarded by the queue lock).
  bool snapshot_owed = false;
  // Store clock MonotonicMs of the last request naming the user (lease).
  int64_t last_used_ms = 0;  // guarded by stream's control lock
};

class SessionStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public std::enable_shared_from_this<SessionStream> {
 public:
  // Starts the stream's reactor; returned to gRPC. `gate` may be null.
  // `push_batches`: the client opted into SessionResponse{pushes}.
  static SessionStream* Start(SessionHub* hub, ExposureFilterHandlers* handlers,
                              AdmissionGate* gate, bool push_batches);

  SessionStream(SessionHub* hub, ExposureFilterHandlers* handlers,
                AdmissionGate* gate, bool push_batches);

  // A run of queued pushes sent as one message is at most this many
  // pushes and bytes (a push bigger than that goes alone). Past a few
  // dozen pushes the per-message cost a batch saves is already shared
  // out; the bound keeps one message, the copy that builds it and the
  // client's parse of it small next to a client's default 4 MiB receive
  // limit, and keeps a batch from holding back answers queued behind it
  // for longer than a few HTTP/2 windows.
  static constexpr size_t kMaxBatchPushes = 256;
  static constexpr size_t kMaxBatchBytes = 256 * 1024;
  ~SessionStream() override;

  // --- From the hub's apply path (under its shard lock) -----------------
  // Queues a push for `sub` unless it awaits a snapshot; may overflow the
  // queue (resync, or the end of the stream). True when the stream needs
  // a kick once the locks are released.
  bool EnqueuePush(SessionSubscription* sub, const grpc::ByteBuffer& message,
                   size_t bytes, size_t items);

  // --- From anywhere, holding no lock -----------------------------------
  // Hands the next queued message to gRPC if none is being written, or
  // finishes the stream when asked to and allowed.
  void Kick();
  // Ends the stream with `status`: `drain` sends what is queued first.
  enum class EndReason { kClient, kOverflow, kShutdown, kLimit, kBadRequest };
  void End(const grpc::Status& status, bool drain, EndReason reason);
  // Housekeeping: expires subscriptions idle for the lease, retries
  // pending snapshots.
  void Tick(int64_t now_monotonic_ms);

  // For tests: bytes and messages queued, subscriptions held.
  int64_t queued_bytes() const;
  size_t subscription_count() const;

 private:
  friend struct SessionSubscription;
  enum class Kind { kPush, kSnapshot, kAnswer };
  struct Queued {
    grpc::ByteBuffer message;
    size_t bytes = 0;
    Kind kind = Kind::kAnswer;
  };
  // Takes the run of pushes at the queue's front (at least two, within
  // the batch bounds) for one SessionResponse{pushes}: false, taking
  // nothing, when there is no such run.
  bool TakePushRunLocked(std::vector<grpc::ByteBuffer>* run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // grpc::ServerBidiReactor.
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // Starts the next read unless reading is paused or the stream is ending.
  void ReadNext();
  void Handle(const exposure::v1::SessionRequest& request);
  void HandleSubscribe(uint64_t id, const exposure::v1::SessionSubscribe& s);
  void HandleUnsubscribe(uint64_t id,
                         const exposure::v1::SessionUnsubscribe& u);
  void HandleFilter(uint64_t id, const exposure::v1::FilterRecalledRequest& f);
  void HandlePing(uint64_t id);
  // Pulls `sub`'s filter, registers `sub` with the hub (if it is not yet)
  // and queues the snapshot (answering `id`, or 0), all under the user's
  // shard lock. *queued is false when the snapshot did not fit the queue:
  // the subscription is then in `pending_`, unsynced.
  absl::Status TakeSnapshot(SessionSubscription* sub, uint64_t id,
                            const std::string& if_version,
                            const exposure::v1::SessionSubscribe* request,
                            bool* queued)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // Snapshots the subscriptions a resync or a full queue left waiting, as
  // long as the queue is under half its budget.
  void SnapshotPending();
  // Drops every subscription (hub first), e.g. when the client is done.
  void UnsubscribeAll();
  void EnqueueAnswer(const exposure::v1::SessionResponse& response);
  void EnqueueError(uint64_t id, absl::string_view kind,
                    const absl::Status& status);
  // Resync: drops queued pushes and snapshots, bumps the generation.
  void OverflowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLocked(const grpc::Status& status, bool drain, EndReason reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearQueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports the queue's size after it grew (SessionHub::NoteStreamQueue).
  void NoteQueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool BelowLocked(int divisor) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts at most one write, or Finish; Kick runs it as a loop
  // (inline_completion_loop.h).
  void KickOnce();

  SessionHub* const hub_;
  ExposureFilterHandlers* const handlers_;
  AdmissionGate* const gate_;
  const bool push_batches_;
  std::shared_ptr<SessionStream> self_;  // until OnDone

  // The subscription set. Held across a subscribe's pull (store lock
  // inside), so changes to one stream's subscriptions are serialized.
  mutable Mutex control_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<SessionSubscription>> subs_
      ABSL_GUARDED_BY(control_mu_);

  // The outgoing queue and the call's state.
  mutable Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queue_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The message gRPC is writing: set under mu_ with writing_, read by
  // gRPC until OnWriteDone.
  grpc::ByteBuffer write_buf_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  int read_starting_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool end_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
  // Sync generation (starts at 1; 0 means "never" in a subscription).
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  // A resync is under way until every subscription was snapshotted again.
  bool resync_in_progress_ ABSL_GUARDED_BY(mu_) = false;
  // Every subscription needs a snapshot (set by an overflow, turned into
  // `pending_` by SnapshotPending).
  bool resync_all_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::string> pending_ ABSL_GUARDED_BY(mu_);

  // The read side: one read in flight, only touched by the reading thread.
  grpc::ByteBuffer read_buf_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SESSION_STREAM_H_
