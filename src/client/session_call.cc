#include "src/client/session_call.h"

#include <utility>

#include "exposure_filter/session_push_batches.h"
#include "src/base/inline_completion_loop.h"

namespace exposure_filter {

std::shared_ptr<SessionCall> SessionCall::Start(
    exposure::v1::ExposureFilter::Stub* stub, Listener* listener) {
  auto call = std::make_shared<SessionCall>(listener);
  // The listener reads SessionResponse{pushes} (its OnResponse hands each
  // push on as if it came alone), so the server may batch queued pushes.
  call->ctx_.AddMetadata(kSessionPushBatchesMetadataKey,
                         kSessionPushBatchesMetadataValue);
  stub->async()->Session(&call->ctx_, call.get());
  // Writes are started from any thread, not only from reactions: the hold
  // keeps gRPC from calling OnDone (and freeing the call) while one may
  // still be started. Removed once the read side has seen the end and no
  // write is in flight.
  call->AddHold();
  call->StartRead(&call->read_msg_);
  call->StartCall();
  return call;
}

bool SessionCall::Send(exposure::v1::SessionRequest request) {
  {
    absl::MutexLock lock(&mu_);
    if (write_failed_ || closing_) return false;
    out_.push_back(std::move(request));
  }
  Kick();
  return true;
}

void SessionCall::Kick() {
  RunAsLoop(this, [this] { KickOnce(); });
}

void SessionCall::KickOnce() {
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || write_failed_ || closing_ || out_.empty()) return;
    write_msg_ = std::move(out_.front());
    out_.pop_front();
    writing_ = true;
  }
  StartWrite(&write_msg_);
}

void SessionCall::OnWriteDone(bool ok) {
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The stream is broken; the read side sees the end too.
      write_failed_ = true;
      out_.clear();
    }
    release = closing_ && !hold_removed_;
    hold_removed_ |= release;
  }
  if (release) {
    RemoveHold();
    return;
  }
  Kick();
}

void SessionCall::OnReadDone(bool ok) {
  if (ok) {
    listener_->OnResponse(this, read_msg_);
    StartRead(&read_msg_);
    return;
  }
  // The stream ended: no write starts from now on, and once none is in
  // flight the hold goes and gRPC can finish the call (OnDone).
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    out_.clear();
    release = !writing_ && !hold_removed_;
    hold_removed_ |= release;
  }
  if (release) RemoveHold();
}

SessionCall::~SessionCall() {
  Cancel();
  WaitDone();
}

void SessionCall::OnDone(const grpc::Status& status) {
  // gRPC touches nothing of the call after this; the owner, woken by
  // done_, destroys it on its own thread.
  ended_.store(true, std::memory_order_release);
  listener_->OnEnded(this, status);
  done_.Notify();
}

}  // namespace exposure_filter
