// SessionCall: one Session stream (docs/session-stream.md) for
// FilterReplica, on gRPC's synchronous API with a reader thread of its own.
// A request is written on the thread that sends it (one at a time, in the
// order the writers take the lock); every response is handed to the
// listener on the reader thread as it is read; the listener hears once
// when the call ends.
//
// Why not the callback API: there every message each way is a hand-off
// between gRPC's callback threads and the caller (a write completes on
// another thread, which then starts the next; a read wakes one of gRPC's
// threads, which wakes the waiting caller). Here the sender writes inline
// and the reader thread polls the call's own completion queue, so a
// message costs one wake-up on the receiving side and none on the sending
// side (docs/performance.md "The feed loop" has the measurement).
//
// The owner's reference is the only one: dropping it cancels the stream
// and joins the reader thread, so it is never dropped from the listener's
// callbacks (they run on that thread).
#ifndef EXPOSURE_FILTER_SRC_CLIENT_SESSION_CALL_H_
#define EXPOSURE_FILTER_SRC_CLIENT_SESSION_CALL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"

namespace exposure_filter {

class SessionCall final {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // On the call's reader thread, one response at a time, in stream
    // order. The stream opts into push batches: a listener must take
    // SessionResponse{pushes} as its pushes, one by one.
    virtual void OnResponse(const SessionCall* call,
                            const exposure::v1::SessionResponse& r) = 0;
    // Once, when the stream has ended (any status); nothing follows.
    virtual void OnEnded(const SessionCall* call,
                         const grpc::Status& status) = 0;
  };

  // Starts the stream on `stub`; `listener` must outlive the call.
  static std::shared_ptr<SessionCall> Start(
      exposure::v1::ExposureFilter::Stub* stub, Listener* listener);

  // Writes `request` on this thread, after any write another thread has
  // started; false once the stream is ending or broken. Blocks while HTTP/2
  // flow control holds the stream (a server that stops reading); Cancel
  // releases it.
  bool Send(const exposure::v1::SessionRequest& request);
  // Send, held back (gRPC's buffer hint): the request goes on the wire with
  // the next request sent without it, in one write, instead of a system
  // call and a server wake-up of its own. For requests nobody waits on (a
  // quiet unsubscribe); holds_buffered() says one is waiting for the next
  // write, which the caller must make happen (the pinger's ping does).
  bool SendBuffered(const exposure::v1::SessionRequest& request);
  // Send, unless another thread's write is running: false then too, at
  // once. For the pinger, which must not wait behind a write stuck on a
  // server that stopped reading (it is the one that notices).
  bool TrySend(const exposure::v1::SessionRequest& request);
  bool holds_buffered() const {
    return holds_buffered_.load(std::memory_order_relaxed);
  }
  // How long the write running now has been blocked (zero if none): a
  // server that stopped reading holds a write once HTTP/2's window is full.
  absl::Duration WriteBlockedFor() const;
  // Ends the stream (CANCELLED) if it has not ended.
  void Cancel() { ctx_.TryCancel(); }
  bool ended() const { return ended_.load(std::memory_order_acquire); }
  // Until the listener has heard OnEnded.
  void WaitDone() { done_.WaitForNotification(); }

  explicit SessionCall(Listener* listener) : listener_(listener) {}
  // Cancels, waits for the end and joins the reader thread; never from the
  // listener's callbacks.
  ~SessionCall();

 private:
  void ReadLoop();
  bool SendLocked(const exposure::v1::SessionRequest& request, bool buffered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  Listener* const listener_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<exposure::v1::SessionRequest,
                                           exposure::v1::SessionResponse>>
      stream_;
  absl::Mutex write_mu_;
  // A write failed or the read side saw the end: nothing more is written.
  bool closed_ ABSL_GUARDED_BY(write_mu_) = false;
  // When the running write started, in absl::GetCurrentTimeNanos(); 0 when
  // none runs. Read without the lock (by the pinger).
  std::atomic<int64_t> write_started_ns_{0};
  // The last write was SendBuffered's: it waits in gRPC for the next one.
  std::atomic<bool> holds_buffered_{false};
  std::atomic<bool> ended_{false};
  absl::Notification done_;
  std::thread reader_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_CLIENT_SESSION_CALL_H_
