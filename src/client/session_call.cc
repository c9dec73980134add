#include "src/client/session_call.h"

#include <utility>

#include "exposure_filter/session_push_batches.h"

namespace exposure_filter {

std::shared_ptr<SessionCall> SessionCall::Start(
    exposure::v1::ExposureFilter::Stub* stub, Listener* listener) {
  auto call = std::make_shared<SessionCall>(listener);
  // The listener reads SessionResponse{pushes} (its OnResponse hands each
  // push on as if it came alone), so the server may batch queued pushes.
  call->ctx_.AddMetadata(kSessionPushBatchesMetadataKey,
                         kSessionPushBatchesMetadataValue);
  // Corked: the initial metadata goes with the first request, so starting
  // the call never blocks on a connection being made.
  call->ctx_.set_initial_metadata_corked(true);
  call->stream_ = stub->Session(&call->ctx_);
  SessionCall* raw = call.get();
  call->reader_ = std::thread([raw] { raw->ReadLoop(); });
  return call;
}

bool SessionCall::Send(const exposure::v1::SessionRequest& request) {
  absl::MutexLock lock(&write_mu_);
  return SendLocked(request, /*buffered=*/false);
}

bool SessionCall::SendBuffered(const exposure::v1::SessionRequest& request) {
  absl::MutexLock lock(&write_mu_);
  return SendLocked(request, /*buffered=*/true);
}

bool SessionCall::TrySend(const exposure::v1::SessionRequest& request) {
  if (!write_mu_.TryLock()) return false;
  const bool sent = SendLocked(request, /*buffered=*/false);
  write_mu_.Unlock();
  return sent;
}

bool SessionCall::SendLocked(const exposure::v1::SessionRequest& request,
                             bool buffered) {
  if (closed_) return false;
  write_started_ns_.store(absl::GetCurrentTimeNanos(),
                          std::memory_order_relaxed);
  // With the buffer hint, HTTP/2 (chttp2) appends the message to the
  // stream's buffer and completes the write at once unless 64 KiB are
  // buffered; the next write without it sends everything buffered.
  grpc::WriteOptions options;
  if (buffered) options.set_buffer_hint();
  const bool ok = stream_->Write(request, options);
  holds_buffered_.store(buffered && ok, std::memory_order_relaxed);
  write_started_ns_.store(0, std::memory_order_relaxed);
  if (!ok) {
    // The stream is broken; the read side sees the end too.
    closed_ = true;
    return false;
  }
  return true;
}

absl::Duration SessionCall::WriteBlockedFor() const {
  const int64_t started = write_started_ns_.load(std::memory_order_relaxed);
  if (started == 0) return absl::ZeroDuration();
  return absl::Nanoseconds(absl::GetCurrentTimeNanos() - started);
}

void SessionCall::ReadLoop() {
  exposure::v1::SessionResponse r;
  while (stream_->Read(&r)) listener_->OnResponse(this, r);
  grpc::Status status;
  {
    // Finish only once no write is running, and none starts after it.
    absl::MutexLock lock(&write_mu_);
    closed_ = true;
    status = stream_->Finish();
  }
  ended_.store(true, std::memory_order_release);
  listener_->OnEnded(this, status);
  done_.Notify();
}

SessionCall::~SessionCall() {
  Cancel();
  if (reader_.joinable()) reader_.join();
}

}  // namespace exposure_filter
