// A raw Session stream client for tests: writes SessionRequests, and a
// reader thread queues every SessionResponse so a test can wait for the
// next one with a deadline (a broken server fails the test instead of
// hanging it). It can also stop reading, to play a client that does not
// keep up, and stop again after it read for a while.
#ifndef EXPOSURE_FILTER_TESTS_SERVER_SESSION_TEST_CLIENT_H_
#define EXPOSURE_FILTER_TESTS_SERVER_SESSION_TEST_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/server/config/server_config.h"

namespace exposure_filter::testing {

// The in-process server the session tests start: memory only, an
// ephemeral port, few shards, a short drain.
inline ServerConfig SessionTestConfig() {
  ServerConfig c;
  c.listen_address = "127.0.0.1:0";
  c.shards = 4;
  c.shutdown_grace = absl::Seconds(1);
  return c;
}

// FilterRecalled's answer (unary, KEEP_MASK) as one keep flag per id, the
// reference a local answer is compared with; empty if the call failed.
inline std::vector<uint8_t> ServerKeep(exposure::v1::ExposureFilter::Stub* stub,
                                       const std::string& surface,
                                       const std::string& user,
                                       const std::vector<uint64_t>& ids) {
  exposure::v1::FilterRecalledRequest req;
  req.set_surface(surface);
  req.set_user_id(user);
  req.set_mode(exposure::v1::KEEP_MASK);
  req.mutable_candidate_ids()->Add(ids.begin(), ids.end());
  exposure::v1::FilterRecalledResponse resp;
  grpc::ClientContext ctx;
  if (!stub->FilterRecalled(&ctx, req, &resp).ok()) return {};
  std::vector<uint8_t> keep(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    keep[i] =
        (static_cast<unsigned char>(resp.keep_mask()[i / 8]) >> (i % 8)) & 1;
  }
  return keep;
}

// Records items first .. first + n - 1 for the user on surface "h" (the
// session tests' surface) in one call; true when the server acknowledged.
inline bool RecordItems(exposure::v1::ExposureFilter::Stub* stub,
                        const std::string& user, uint64_t first, int n) {
  exposure::v1::RecordExposureRequest req;
  req.set_surface("h");
  exposure::v1::Exposure* e = req.add_exposures();
  e->set_user_id(user);
  for (int i = 0; i < n; ++i) e->add_item_ids(first + i);
  exposure::v1::RecordExposureResponse resp;
  grpc::ClientContext ctx;
  return stub->RecordExposure(&ctx, req, &resp).ok();
}

class SessionTestClient {
 public:
  // Opens a stream on `channel` with `metadata` (key, value pairs); the
  // reader starts at once unless `start_reading` is false (then call
  // StartReading()).
  explicit SessionTestClient(
      const std::shared_ptr<grpc::Channel>& channel, bool start_reading = true,
      const std::vector<std::pair<std::string, std::string>>& metadata = {})
      : stub_(exposure::v1::ExposureFilter::NewStub(channel)) {
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(120));
    for (const auto& [key, value] : metadata) ctx_.AddMetadata(key, value);
    stream_ = stub_->Session(&ctx_);
    if (start_reading) StartReading();
  }
  ~SessionTestClient() {
    ctx_.TryCancel();
    ResumeReading();  // a paused reader must see the cancellation
    StartReading();   // a reader that never started must still join
    if (reader_.joinable()) reader_.join();
    if (!finished_) stream_->Finish();
  }

  void StartReading() {
    std::lock_guard<std::mutex> lock(mu_);
    if (reading_started_) return;
    reading_started_ = true;
    reader_ = std::thread([this] {
      exposure::v1::SessionResponse r;
      while (true) {
        {
          std::unique_lock<std::mutex> l(mu_);
          cv_.wait(l, [&] { return !paused_; });
        }
        if (!stream_->Read(&r)) break;
        std::lock_guard<std::mutex> l(mu_);
        received_.push_back(r);
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> l(mu_);
      ended_ = true;
      cv_.notify_all();
    });
  }

  // Stops reading after the read under way (one more message may still
  // arrive): the server's writes then stall once the client's transport
  // window is full. ResumeReading reads again.
  void PauseReading() {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
  }
  void ResumeReading() {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
    cv_.notify_all();
  }

  bool Write(const exposure::v1::SessionRequest& request) {
    return stream_->Write(request);
  }
  bool Subscribe(uint64_t id, const std::string& surface,
                 const std::string& user, const std::string& if_version = "") {
    exposure::v1::SessionRequest r;
    r.set_request_id(id);
    r.mutable_subscribe()->set_surface(surface);
    r.mutable_subscribe()->set_user_id(user);
    r.mutable_subscribe()->set_if_version(if_version);
    return Write(r);
  }
  bool Unsubscribe(uint64_t id, const std::string& surface,
                   const std::string& user, bool quiet = false) {
    exposure::v1::SessionRequest r;
    r.set_request_id(id);
    r.mutable_unsubscribe()->set_surface(surface);
    r.mutable_unsubscribe()->set_user_id(user);
    r.mutable_unsubscribe()->set_quiet(quiet);
    return Write(r);
  }
  bool Ping(uint64_t id) {
    exposure::v1::SessionRequest r;
    r.set_request_id(id);
    r.mutable_ping();
    return Write(r);
  }
  bool WritesDone() { return stream_->WritesDone(); }

  // The next response, or nullopt if none arrives within `wait` (or the
  // stream ended with nothing left).
  std::optional<exposure::v1::SessionResponse> Next(
      std::chrono::milliseconds wait = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return !received_.empty() || ended_; });
    if (received_.empty()) return std::nullopt;
    exposure::v1::SessionResponse r = std::move(received_.front());
    received_.pop_front();
    return r;
  }
  // Responses received and not taken yet.
  size_t Pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_.size();
  }
  // The reader has seen the end of the stream.
  bool Ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  // Waits for the end of the stream (the reader saw it) and its status.
  grpc::Status Finish() {
    ResumeReading();
    StartReading();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(60), [&] { return ended_; });
    }
    if (reader_.joinable()) reader_.join();
    finished_ = true;
    return stream_->Finish();
  }

 private:
  std::unique_ptr<exposure::v1::ExposureFilter::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<exposure::v1::SessionRequest,
                                           exposure::v1::SessionResponse>>
      stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<exposure::v1::SessionResponse> received_;
  bool ended_ = false;
  bool reading_started_ = false;
  bool paused_ = false;
  bool finished_ = false;
  std::thread reader_;
};

}  // namespace exposure_filter::testing

#endif  // EXPOSURE_FILTER_TESTS_SERVER_SESSION_TEST_CLIENT_H_
