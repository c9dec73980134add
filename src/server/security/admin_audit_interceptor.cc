#include "src/server/security/admin_audit_interceptor.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/message_allocator.h>

#include <string>

#include "exposure/v1/exposure_filter.pb.h"
#include "src/server/security/caller_identity.h"
#include "src/server/security/rpc_roles.h"

namespace exposure_filter {
namespace {

using grpc::experimental::InterceptionHookPoints;

// The request of a unary callback call, from its message holder. The
// generated handlers hold the parsed message; a method registered raw
// (ByteBuffer in, parsed by our code) holds the bytes, parsed again here.
template <typename Request, typename Response>
const Request* RequestOf(grpc::CallbackServerContext* ctx, Request* scratch) {
  grpc::RpcAllocatorState* state = ctx->GetRpcAllocatorState();
  if (auto* typed =
          dynamic_cast<grpc::MessageHolder<Request, Response>*>(state)) {
    return typed->request();
  }
  if (auto* raw = dynamic_cast<
          grpc::MessageHolder<grpc::ByteBuffer, grpc::ByteBuffer>*>(state)) {
    if (raw->request() == nullptr) return nullptr;
    grpc::ByteBuffer copy(*raw->request());  // shares the slices
    if (grpc::SerializationTraits<Request>::Deserialize(&copy, scratch).ok()) {
      return scratch;
    }
  }
  return nullptr;
}

// Copies the surface and user ids of the admin RPC `rpc` into `record`.
void AddRequestFields(absl::string_view rpc, grpc::CallbackServerContext* ctx,
                      AdminAuditRecord* record) {
  namespace v1 = exposure::v1;
  if (rpc == "DeleteUser") {
    v1::DeleteUserRequest scratch;
    if (const auto* req =
            RequestOf<v1::DeleteUserRequest, v1::DeleteUserResponse>(
                ctx, &scratch)) {
      record->has_surface = true;
      record->surface = req->surface();
      record->users = {req->user_id()};
    }
  } else if (rpc == "AddTracedUsers") {
    v1::AddTracedUsersRequest scratch;
    if (const auto* req =
            RequestOf<v1::AddTracedUsersRequest, v1::AddTracedUsersResponse>(
                ctx, &scratch)) {
      record->users.assign(req->user_ids().begin(), req->user_ids().end());
    }
  } else if (rpc == "RemoveTracedUsers") {
    v1::RemoveTracedUsersRequest scratch;
    if (const auto* req =
            RequestOf<v1::RemoveTracedUsersRequest,
                      v1::RemoveTracedUsersResponse>(ctx, &scratch)) {
      record->users.assign(req->user_ids().begin(), req->user_ids().end());
    }
  }
  // ListTracedUsers and GetServerStats name no user.
}

class AdminAuditInterceptor final : public grpc::experimental::Interceptor {
 public:
  AdminAuditInterceptor(const AdminAudit* audit,
                        const AuthorizationPolicy* policy,
                        absl::string_view rpc,
                        grpc::experimental::ServerRpcInfo* info)
      : audit_(audit), policy_(policy), info_(info) {
    record_.rpc = rpc;
  }
  ~AdminAuditInterceptor() override {
    if (!recorded_) {
      // No status was sent: the call ended first. Its request fields are
      // not read here, the call's objects may be gone.
      record_.code = static_cast<int>(grpc::StatusCode::CANCELLED);
      record_.detail = "the call ended before the server answered";
      audit_->Record(record_);
    }
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      grpc::ServerContextBase* ctx = info_->server_context();
      record_.peer = ctx->peer();
      const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
      if (auth != nullptr) {
        const std::vector<std::string> identities = CallerIdentities(*auth);
        record_.identity = LoggedIdentity(
            identities, policy_ == nullptr
                            ? nullptr
                            : policy_->Grantee(identities, Role::kAdmin));
      }
    }
    if (!recorded_ && methods->QueryInterceptionHookPoint(
                          InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      record_.code = static_cast<int>(status.error_code());
      record_.detail = status.error_message();
      // Every exposure.v1 method is a callback method.
      if (auto* ctx = dynamic_cast<grpc::CallbackServerContext*>(
              info_->server_context())) {
        AddRequestFields(record_.rpc, ctx, &record_);
      }
      audit_->Record(record_);
      recorded_ = true;
    }
    methods->Proceed();
  }

 private:
  const AdminAudit* const audit_;
  const AuthorizationPolicy* const policy_;
  grpc::experimental::ServerRpcInfo* const info_;
  AdminAuditRecord record_;
  bool recorded_ = false;
};

class AdminAuditInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  AdminAuditInterceptorFactory(const AdminAudit* audit,
                               const AuthorizationPolicy* policy)
      : audit_(audit), policy_(policy) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const RpcAccess access = AccessFor(info->method());
    // Unknown methods (index 0) are answered UNIMPLEMENTED and change
    // nothing; the data plane pays nothing for the audit.
    if (access.open || access.index == 0 || access.role != Role::kAdmin) {
      return nullptr;
    }
    return new AdminAuditInterceptor(audit_, policy_, access.rpc, info);
  }

 private:
  const AdminAudit* const audit_;
  const AuthorizationPolicy* const policy_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewAdminAuditInterceptorFactory(const AdminAudit* audit,
                                const AuthorizationPolicy* policy) {
  return std::make_unique<AdminAuditInterceptorFactory>(audit, policy);
}

}  // namespace exposure_filter
