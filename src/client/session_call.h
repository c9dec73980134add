// SessionCall: one Session stream (docs/session-stream.md) on gRPC's
// callback API, for FilterReplica. Requests are queued and written one at
// a time from any thread; every response is handed to the listener on
// gRPC's thread as it is read; the listener hears once when the call ends.
//
// The owner's reference is the only one: dropping it cancels the stream and
// waits for its end, on the owner's thread. The call is never destroyed on
// gRPC's callback thread, because its ClientContext holds the channel: a
// channel released there for the last time shuts down the completion queue
// that thread serves and joins the thread from itself (gRPC's callback
// queue on Linux), and the thread then runs on a freed queue.
#ifndef EXPOSURE_FILTER_SRC_CLIENT_SESSION_CALL_H_
#define EXPOSURE_FILTER_SRC_CLIENT_SESSION_CALL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"

namespace exposure_filter {

class SessionCall final
    : public grpc::ClientBidiReactor<exposure::v1::SessionRequest,
                                     exposure::v1::SessionResponse> {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // On gRPC's thread, one response at a time, in stream order. The
    // stream opts into push batches: a listener must take
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

  // Queues `request`; false once the stream is ending.
  bool Send(exposure::v1::SessionRequest request);
  // Ends the stream (CANCELLED) if it has not ended.
  void Cancel() { ctx_.TryCancel(); }
  bool ended() const { return ended_.load(std::memory_order_acquire); }
  // Until the listener has heard OnEnded.
  void WaitDone() { done_.WaitForNotification(); }

  explicit SessionCall(Listener* listener) : listener_(listener) {}
  // Cancels and waits for the end; never from the listener's callbacks.
  ~SessionCall() override;

 private:
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;
  // Starts the next queued write if none is in flight, as a loop
  // (inline_completion_loop.h): a write completing inside StartWrite does
  // not recurse.
  void Kick();
  void KickOnce();

  Listener* const listener_;
  grpc::ClientContext ctx_;
  exposure::v1::SessionResponse read_msg_;
  absl::Mutex mu_;
  std::deque<exposure::v1::SessionRequest> out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  // The read side saw the end of the stream: nothing more is written.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_removed_ ABSL_GUARDED_BY(mu_) = false;
  // The request gRPC is writing: set with writing_, read by gRPC until
  // OnWriteDone.
  exposure::v1::SessionRequest write_msg_;
  std::atomic<bool> ended_{false};
  absl::Notification done_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_CLIENT_SESSION_CALL_H_
