// A scripted exposure.v1 service for client tests: fails the first N calls
// with a chosen code (and, if set, an owner hint trailer), can hold a call
// until released or cancelled by the client, answers GetFilter with whatever
// the test sets and FilterRecalled by keeping every candidate; `lagging`
// plays a copy past --max_serving_lag (FilterRecalled UNAVAILABLE unless it
// sets allow_lagging). Counts every call it sees (every attempt).
#ifndef EXPOSURE_FILTER_TESTS_CLIENT_FAKE_EXPOSURE_FILTER_SERVICE_H_
#define EXPOSURE_FILTER_TESTS_CLIENT_FAKE_EXPOSURE_FILTER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"

namespace exposure_filter {

class FakeExposureFilterService final
    : public exposure::v1::ExposureFilter::Service {
 public:
  std::atomic<int> calls{0};
  std::atomic<int> fail_first{0};
  std::atomic<grpc::StatusCode> fail_code{grpc::StatusCode::UNAVAILABLE};
  std::atomic<bool> hold{false};
  absl::Notification release;
  std::atomic<int> cancelled{0};  // held calls the client gave up on
  std::atomic<bool> lagging{false};
  std::atomic<int> allow_lagging_calls{0};  // FilterRecalled with the flag
  // Set before the server serves (not synchronised).
  exposure::v1::GetFilterResponse get_filter_answer;
  std::string owner_hint;  // "x-exposure-owner" trailer on failures, if set

  grpc::Status RecordExposure(
      grpc::ServerContext* ctx, const exposure::v1::RecordExposureRequest*,
      exposure::v1::RecordExposureResponse* resp) override {
    grpc::Status s = Enter(ctx);
    if (s.ok()) resp->set_items_recorded(1);
    return s;
  }

  grpc::Status GetFilter(grpc::ServerContext* ctx,
                         const exposure::v1::GetFilterRequest*,
                         exposure::v1::GetFilterResponse* resp) override {
    grpc::Status s = Enter(ctx);
    if (s.ok()) *resp = get_filter_answer;
    return s;
  }

  grpc::Status FilterRecalled(
      grpc::ServerContext* ctx, const exposure::v1::FilterRecalledRequest* req,
      exposure::v1::FilterRecalledResponse* resp) override {
    if (req->allow_lagging()) ++allow_lagging_calls;
    if (lagging) {
      ++calls;
      if (!req->allow_lagging()) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "FilterRecalled: this copy is lagging 1.3s behind");
      }
      *resp->mutable_kept_ids() = req->candidate_ids();
      resp->mutable_staleness()->set_lag_ms(1300);
      resp->mutable_staleness()->set_lagging(true);
      return grpc::Status::OK;
    }
    grpc::Status s = Enter(ctx);
    if (s.ok()) *resp->mutable_kept_ids() = req->candidate_ids();
    return s;
  }

 private:
  grpc::Status Enter(grpc::ServerContext* ctx) {
    const int n = ++calls;
    if (hold) {
      while (!release.WaitForNotificationWithTimeout(absl::Milliseconds(5))) {
        if (ctx->IsCancelled()) {
          ++cancelled;
          return grpc::Status(grpc::StatusCode::CANCELLED, "held, cancelled");
        }
      }
    }
    if (n <= fail_first) {
      if (!owner_hint.empty()) {
        ctx->AddTrailingMetadata("x-exposure-owner", owner_hint);
      }
      return grpc::Status(fail_code.load(), "scripted");
    }
    return grpc::Status::OK;
  }
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TESTS_CLIENT_FAKE_EXPOSURE_FILTER_SERVICE_H_
