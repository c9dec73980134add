#include "src/server/exposure_filter_service.h"

#include <spdlog/spdlog.h>

#include <string>

#include "exposure_filter/owner_hint.h"
#include "exposure_filter/session_push_batches.h"
#include "src/base/log_rate_limiter.h"
#include "src/server/request_parser.h"
#include "src/server/session_stream.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;

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

// Scale-out: "not my user" carries the owner for routing clients
// (include/exposure_filter/owner_hint.h) as trailing metadata.
void AddOwnerHint(grpc::CallbackServerContext* ctx, const absl::Status& s) {
  if (const auto owner = s.GetPayload(kOwnerHintPayloadUrl);
      owner.has_value()) {
    ctx->AddTrailingMetadata(kOwnerHintMetadataKey, std::string(*owner));
  }
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

// The cold RPCs parse into messages on the stack (no pool to keep warm).
template <typename Req, typename Resp>
ArenaMessageAllocator<Req, Resp>* NoAllocator() {
  return nullptr;
}

// Parses `wire_req` into `req`, runs `handler` and serializes `resp` into
// `wire_resp`: the whole of an RPC between the bytes in and the bytes out.
template <typename Req, typename Resp, typename Handler>
absl::Status ParseHandleSerialize(grpc::ByteBuffer* wire_req,
                                  grpc::ByteBuffer* wire_resp, Req* req,
                                  Resp* resp, Handler& handler) {
  if (absl::Status s = ParseRequest(wire_req, req); !s.ok()) return s;
  const absl::Status s = handler(*req, resp);
  if (!s.ok()) return s;
  return SerializeResponse(*resp, wire_resp);
}

}  // namespace

template <typename Req, typename Resp, typename Handler>
grpc::ServerUnaryReactor* ExposureFilterService::Serve(
    Context* ctx, const char* method, Gate gate, const Bytes* req, Bytes* resp,
    ArenaMessageAllocator<Req, Resp>* allocator, Handler&& handler) {
  // Admitted by the size received, before any parsing: under overload the
  // shed call costs no parse, and the limit covers the parsed copy too.
  const uint64_t request_bytes = req->Length();
  const bool gated = gate == Gate::kAdmit && gate_ != nullptr;
  if (gated) {
    if (absl::Status admit = gate_->Admit(request_bytes); !admit.ok()) {
      LogShed(method, admit);
      Reactor* reactor = ctx->DefaultReactor();
      reactor->Finish(ToGrpcStatus(admit));
      return reactor;
    }
  }
  // gRPC owns the request bytes and hands them over as const; the parse
  // releases their slices as gRPC's own deserializer would.
  Bytes* wire_req = const_cast<Bytes*>(req);
  absl::Status s;
  if (allocator != nullptr) {
    grpc::MessageHolder<Req, Resp>* messages = allocator->AllocateMessages();
    s = ParseHandleSerialize(wire_req, resp, messages->request(),
                             messages->response(), handler);
    messages->Release();  // the response is bytes in `resp` by now
  } else {
    // The methods without a pooled arena are the small and admin ones: they
    // parse a copy that shares the slices, so the request bytes stay whole
    // for the admin audit interceptor, which reads the surface and user ids
    // from them after the handler ran (admin_audit_interceptor.cc).
    Bytes shared_copy(*req);
    Req request;
    Resp response;
    s = ParseHandleSerialize(&shared_copy, resp, &request, &response, handler);
  }
  LogError(method, s);
  AddOwnerHint(ctx, s);
  Reactor* reactor =
      gated ? new AdmittedReactor(gate_, request_bytes) : ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

template <typename Req, typename Resp, typename Handler>
grpc::ServerUnaryReactor* ExposureFilterService::ServeThroughLog(
    Context* ctx, const char* method, const Bytes* req, Bytes* resp,
    Handler&& handler) {
  const uint64_t request_bytes = req->Length();
  const bool gated = gate_ != nullptr;
  if (gated) {
    if (absl::Status admit = gate_->Admit(request_bytes); !admit.ok()) {
      LogShed(method, admit);
      Reactor* reactor = ctx->DefaultReactor();
      reactor->Finish(ToGrpcStatus(admit));
      return reactor;
    }
  }
  // The admitted place is held until the delivery report answers: the
  // gate's limits bound the writes waiting for Kafka too.
  Reactor* reactor =
      gated ? new AdmittedReactor(gate_, request_bytes) : ctx->DefaultReactor();
  auto finish = [ctx, reactor, method](const absl::Status& s) {
    LogError(method, s);
    AddOwnerHint(ctx, s);
    reactor->Finish(ToGrpcStatus(s));
  };
  // A shared copy of the slices, as Serve's cold path: the admin audit
  // interceptor reads the request bytes after the handler.
  Bytes shared_copy(*req);
  Req request;
  if (absl::Status s = ParseRequest(&shared_copy, &request); !s.ok()) {
    finish(s);
    return reactor;
  }
  auto response = std::make_unique<Resp>();
  Resp* out = response.get();
  handler(request, out,
          [finish, resp, response = std::move(response)](absl::Status s) {
            if (s.ok()) s = SerializeResponse(*response, resp);
            finish(s);
          });
  return reactor;
}

grpc::ServerUnaryReactor* ExposureFilterService::RecordExposure(
    Context* ctx, const Bytes* req, Bytes* resp) {
  if (handlers_->WritesThroughLog()) {
    return ServeThroughLog<v1::RecordExposureRequest,
                           v1::RecordExposureResponse>(
        ctx, "RecordExposure", req, resp,
        [this](const v1::RecordExposureRequest& r,
               v1::RecordExposureResponse* out,
               ExposureFilterHandlers::WriteDone done) {
          handlers_->RecordExposureThroughLog(r, out, std::move(done));
        });
  }
  return Serve(ctx, "RecordExposure", Gate::kAdmit, req, resp,
               &record_allocator_,
               [this](const v1::RecordExposureRequest& r,
                      v1::RecordExposureResponse* out) {
                 return handlers_->RecordExposure(r, out);
               });
}

grpc::ServerUnaryReactor* ExposureFilterService::FilterRecalled(
    Context* ctx, const Bytes* req, Bytes* resp) {
  return Serve(ctx, "FilterRecalled", Gate::kAdmit, req, resp,
               &filter_allocator_,
               [this](const v1::FilterRecalledRequest& r,
                      v1::FilterRecalledResponse* out) {
                 return handlers_->FilterRecalled(r, out);
               });
}

grpc::ServerUnaryReactor* ExposureFilterService::GetFilter(Context* ctx,
                                                           const Bytes* req,
                                                           Bytes* resp) {
  return Serve(
      ctx, "GetFilter", Gate::kAdmit, req, resp, &get_filter_allocator_,
      [this](const v1::GetFilterRequest& r, v1::GetFilterResponse* out) {
        return handlers_->GetFilter(r, out);
      });
}

grpc::ServerUnaryReactor* ExposureFilterService::GetUserStats(Context* ctx,
                                                              const Bytes* req,
                                                              Bytes* resp) {
  return Serve(
      ctx, "GetUserStats", Gate::kAdmit, req, resp,
      NoAllocator<v1::GetUserStatsRequest, v1::GetUserStatsResponse>(),
      [this](const v1::GetUserStatsRequest& r, v1::GetUserStatsResponse* out) {
        return handlers_->GetUserStats(r, out);
      });
}

grpc::ServerUnaryReactor* ExposureFilterService::DeleteUser(Context* ctx,
                                                            const Bytes* req,
                                                            Bytes* resp) {
  if (handlers_->WritesThroughLog()) {
    return ServeThroughLog<v1::DeleteUserRequest, v1::DeleteUserResponse>(
        ctx, "DeleteUser", req, resp,
        [this](const v1::DeleteUserRequest& r, v1::DeleteUserResponse* out,
               ExposureFilterHandlers::WriteDone done) {
          handlers_->DeleteUserThroughLog(r, out, std::move(done));
        });
  }
  return Serve(
      ctx, "DeleteUser", Gate::kAdmit, req, resp,
      NoAllocator<v1::DeleteUserRequest, v1::DeleteUserResponse>(),
      [this](const v1::DeleteUserRequest& r, v1::DeleteUserResponse* out) {
        return handlers_->DeleteUser(r, out);
      });
}

grpc::ServerUnaryReactor* ExposureFilterService::GetServerStats(
    Context* ctx, const Bytes* req, Bytes* resp) {
  return Serve(
      ctx, "GetServerStats", Gate::kBypass, req, resp,
      NoAllocator<v1::GetServerStatsRequest, v1::GetServerStatsResponse>(),
      [this](const v1::GetServerStatsRequest& r,
             v1::GetServerStatsResponse* out) {
        const absl::Status s = handlers_->GetServerStats(r, out);
        if (s.ok() && gate_ != nullptr) {
          out->set_rpcs_shed(gate_->shed_by_rpcs() + gate_->shed_by_bytes());
        }
        return s;
      });
}

grpc::ServerUnaryReactor* ExposureFilterService::Explain(Context* ctx,
                                                         const Bytes* req,
                                                         Bytes* resp) {
  return Serve(ctx, "Explain", Gate::kAdmit, req, resp,
               NoAllocator<v1::ExplainRequest, v1::ExplainResponse>(),
               [this](const v1::ExplainRequest& r, v1::ExplainResponse* out) {
                 return handlers_->Explain(r, out);
               });
}

grpc::ServerUnaryReactor* ExposureFilterService::AddTracedUsers(
    Context* ctx, const Bytes* req, Bytes* resp) {
  if (handlers_->WritesThroughLog()) {
    return ServeThroughLog<v1::AddTracedUsersRequest,
                           v1::AddTracedUsersResponse>(
        ctx, "AddTracedUsers", req, resp,
        [this](const v1::AddTracedUsersRequest& r,
               v1::AddTracedUsersResponse* out,
               ExposureFilterHandlers::WriteDone done) {
          handlers_->AddTracedUsersThroughLog(r, out, std::move(done));
        });
  }
  return Serve(
      ctx, "AddTracedUsers", Gate::kBypass, req, resp,
      NoAllocator<v1::AddTracedUsersRequest, v1::AddTracedUsersResponse>(),
      [this](const v1::AddTracedUsersRequest& r,
             v1::AddTracedUsersResponse* out) {
        return handlers_->AddTracedUsers(r, out);
      });
}

grpc::ServerUnaryReactor* ExposureFilterService::RemoveTracedUsers(
    Context* ctx, const Bytes* req, Bytes* resp) {
  if (handlers_->WritesThroughLog()) {
    return ServeThroughLog<v1::RemoveTracedUsersRequest,
                           v1::RemoveTracedUsersResponse>(
        ctx, "RemoveTracedUsers", req, resp,
        [this](const v1::RemoveTracedUsersRequest& r,
               v1::RemoveTracedUsersResponse* out,
               ExposureFilterHandlers::WriteDone done) {
          handlers_->RemoveTracedUsersThroughLog(r, out, std::move(done));
        });
  }
  return Serve(ctx, "RemoveTracedUsers", Gate::kBypass, req, resp,
               NoAllocator<v1::RemoveTracedUsersRequest,
                           v1::RemoveTracedUsersResponse>(),
               [this](const v1::RemoveTracedUsersRequest& r,
                      v1::RemoveTracedUsersResponse* out) {
                 return handlers_->RemoveTracedUsers(r, out);
               });
}

grpc::ServerUnaryReactor* ExposureFilterService::ListTracedUsers(
    Context* ctx, const Bytes* req, Bytes* resp) {
  return Serve(
      ctx, "ListTracedUsers", Gate::kBypass, req, resp,
      NoAllocator<v1::ListTracedUsersRequest, v1::ListTracedUsersResponse>(),
      [this](const v1::ListTracedUsersRequest& r,
             v1::ListTracedUsersResponse* out) {
        return handlers_->ListTracedUsers(r, out);
      });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ExposureFilterService::Session(Context* ctx) {
  // Push batches only for a client that said it reads them: an older one
  // would skip the unknown field, and with it the pushes.
  const auto& metadata = ctx->client_metadata();
  const auto it = metadata.find(kSessionPushBatchesMetadataKey);
  const bool push_batches =
      it != metadata.end() && it->second == kSessionPushBatchesMetadataValue;
  return SessionStream::Start(hub_, handlers_, gate_, push_batches);
}

}  // namespace exposure_filter
