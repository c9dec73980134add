// A scripted exposure.v1 service for client tests: fails the first N calls
// with a chosen code, can hold a call until released, and answers GetFilter
// with whatever the test sets. Counts every call it sees (every attempt).
#ifndef EXPOSURE_FILTER_TESTS_CLIENT_FAKE_EXPOSURE_FILTER_SERVICE_H_
#define EXPOSURE_FILTER_TESTS_CLIENT_FAKE_EXPOSURE_FILTER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>

#include "absl/synchronization/notification.h"
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
  // Set before the server serves (not synchronised).
  exposure::v1::GetFilterResponse get_filter_answer;

  grpc::Status RecordExposure(
      grpc::ServerContext*, const exposure::v1::RecordExposureRequest*,
      exposure::v1::RecordExposureResponse* resp) override {
    grpc::Status s = Enter();
    if (s.ok()) resp->set_items_recorded(1);
    return s;
  }

  grpc::Status GetFilter(grpc::ServerContext*,
                         const exposure::v1::GetFilterRequest*,
                         exposure::v1::GetFilterResponse* resp) override {
    grpc::Status s = Enter();
    if (s.ok()) *resp = get_filter_answer;
    return s;
  }

 private:
  grpc::Status Enter() {
    const int n = ++calls;
    if (hold) release.WaitForNotification();
    if (n <= fail_first) return grpc::Status(fail_code.load(), "scripted");
    return grpc::Status::OK;
  }
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TESTS_CLIENT_FAKE_EXPOSURE_FILTER_SERVICE_H_
