#include "src/server/exposure_filter_service.h"

#include <spdlog/spdlog.h>

#include <string>

#include "exposure_filter/owner_hint.h"
#include "src/server/log_rate_limiter.h"

namespace exposure_filter {
namespace {

// absl and gRPC share the canonical status code numbering (0..16).
grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

// Errors that mean a bug or broken state here, not a bad request: worth a
// warning, but at most one line per interval however often they repeat.
bool IsServerFault(absl::StatusCode code) {
  return code == absl::StatusCode::kInternal ||
         code == absl::StatusCode::kUnknown ||
         code == absl::StatusCode::kDataLoss;
}

void LogError(const char* method, const absl::Status& s) {
  if (!s.ok()) {
    if (IsServerFault(s.code())) {
      static LogRateLimiter limiter(absl::Seconds(10));
      uint64_t suppressed = 0;
      if (limiter.Allow(&suppressed)) {
        spdlog::warn(
            "event=rpc_server_error method={} status=\"{}\" suppressed={}",
            method, s.ToString(), suppressed);
      }
    } else {
      // Client errors are the client's to see (and counted by code in
      // grpc_server_handled_total); per-request lines only at debug.
      spdlog::debug("event=rpc_error method={} status=\"{}\"", method,
                    s.ToString());
    }
  }
}

// Scale-out (issue 7): "not my user" carries the owner for routing clients
// (include/exposure_filter/owner_hint.h) as trailing metadata.
void AddOwnerHint(grpc::CallbackServerContext* ctx, const absl::Status& s) {
  if (const auto owner = s.GetPayload(kOwnerHintPayloadUrl);
      owner.has_value()) {
    ctx->AddTrailingMetadata(kOwnerHintMetadataKey, std::string(*owner));
  }
}

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx,
                                 const char* method, const absl::Status& s) {
  LogError(method, s);
  AddOwnerHint(ctx, s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

// Holds an admitted RPC's place at the gate until gRPC is done with the call
// (response sent or call cancelled), so the limit also covers responses
// waiting on slow readers.
class AdmittedReactor final : public grpc::ServerUnaryReactor {
 public:
  AdmittedReactor(AdmissionGate* gate, uint64_t request_bytes)
      : gate_(gate), request_bytes_(request_bytes) {}
  void OnDone() override {
    gate_->Release(request_bytes_);
    delete this;
  }

 private:
  AdmissionGate* const gate_;
  const uint64_t request_bytes_;
};

void LogShed(const char* method, const absl::Status& s) {
  // One line per interval however hard the flood; the metric counts all.
  static LogRateLimiter limiter(absl::Seconds(10));
  uint64_t suppressed = 0;
  if (limiter.Allow(&suppressed)) {
    spdlog::warn("event=overload_shed method={} status=\"{}\" suppressed={}",
                 method, std::string(s.message()), suppressed);
  }
}

}  // namespace

template <typename Handler>
grpc::ServerUnaryReactor* ExposureFilterService::Admitted(
    grpc::CallbackServerContext* ctx, const char* method, size_t request_bytes,
    Handler&& handler) {
  if (gate_ == nullptr) return Finish(ctx, method, handler());
  if (absl::Status admit = gate_->Admit(request_bytes); !admit.ok()) {
    LogShed(method, admit);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(admit));
    return reactor;
  }
  const absl::Status s = handler();
  LogError(method, s);
  AddOwnerHint(ctx, s);
  auto* reactor = new AdmittedReactor(gate_, request_bytes);
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerUnaryReactor* ExposureFilterService::RecordExposure(
    grpc::CallbackServerContext* ctx,
    const exposure::v1::RecordExposureRequest* req,
    exposure::v1::RecordExposureResponse* resp) {
  return Admitted(ctx, "RecordExposure", req->ByteSizeLong(),
                  [&] { return handlers_->RecordExposure(*req, resp); });
}

grpc::ServerUnaryReactor* ExposureFilterService::FilterRecalled(
    grpc::CallbackServerContext* ctx,
    const exposure::v1::FilterRecalledRequest* req,
    exposure::v1::FilterRecalledResponse* resp) {
  return Admitted(ctx, "FilterRecalled", req->ByteSizeLong(),
                  [&] { return handlers_->FilterRecalled(*req, resp); });
}

grpc::ServerUnaryReactor* ExposureFilterService::GetFilter(
    grpc::CallbackServerContext* ctx, const exposure::v1::GetFilterRequest* req,
    exposure::v1::GetFilterResponse* resp) {
  return Admitted(ctx, "GetFilter", req->ByteSizeLong(),
                  [&] { return handlers_->GetFilter(*req, resp); });
}

grpc::ServerUnaryReactor* ExposureFilterService::GetUserStats(
    grpc::CallbackServerContext* ctx,
    const exposure::v1::GetUserStatsRequest* req,
    exposure::v1::GetUserStatsResponse* resp) {
  return Admitted(ctx, "GetUserStats", req->ByteSizeLong(),
                  [&] { return handlers_->GetUserStats(*req, resp); });
}

grpc::ServerUnaryReactor* ExposureFilterService::DeleteUser(
    grpc::CallbackServerContext* ctx,
    const exposure::v1::DeleteUserRequest* req,
    exposure::v1::DeleteUserResponse* resp) {
  return Admitted(ctx, "DeleteUser", req->ByteSizeLong(),
                  [&] { return handlers_->DeleteUser(*req, resp); });
}

grpc::ServerUnaryReactor* ExposureFilterService::GetServerStats(
    grpc::CallbackServerContext* ctx,
    const exposure::v1::GetServerStatsRequest* req,
    exposure::v1::GetServerStatsResponse* resp) {
  const absl::Status s = handlers_->GetServerStats(*req, resp);
  if (s.ok() && gate_ != nullptr) {
    resp->set_rpcs_shed(gate_->shed_by_rpcs() + gate_->shed_by_bytes());
  }
  return Finish(ctx, "GetServerStats", s);
}

grpc::ServerUnaryReactor* ExposureFilterService::Explain(
    grpc::CallbackServerContext* ctx, const exposure::v1::ExplainRequest* req,
    exposure::v1::ExplainResponse* resp) {
  return Admitted(ctx, "Explain", req->ByteSizeLong(),
                  [&] { return handlers_->Explain(*req, resp); });
}

grpc::ServerUnaryReactor* ExposureFilterService::AddTracedUsers(
    grpc::CallbackServerContext* ctx,
    const exposure::v1::AddTracedUsersRequest* req,
    exposure::v1::AddTracedUsersResponse* resp) {
  return Finish(ctx, "AddTracedUsers", handlers_->AddTracedUsers(*req, resp));
}

grpc::ServerUnaryReactor* ExposureFilterService::RemoveTracedUsers(
    grpc::CallbackServerContext* ctx,
    const exposure::v1::RemoveTracedUsersRequest* req,
    exposure::v1::RemoveTracedUsersResponse* resp) {
  return Finish(ctx, "RemoveTracedUsers", handlers_->RemoveTracedUsers(*req, resp));
}

grpc::ServerUnaryReactor* ExposureFilterService::ListTracedUsers(
    grpc::CallbackServerContext* ctx,
    const exposure::v1::ListTracedUsersRequest* req,
    exposure::v1::ListTracedUsersResponse* resp) {
  return Finish(ctx, "ListTracedUsers", handlers_->ListTracedUsers(*req, resp));
}

}  // namespace exposure_filter
