#include "src/server/security/rpc_authorizer.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/server/security/caller_identity.h"
#include "src/server/security/rpc_roles.h"
#include "src/server/security/tls_credentials.h"

namespace exposure_filter {

absl::StatusOr<std::shared_ptr<RpcAuthorizer>> RpcAuthorizer::Create(
    const AuthorizationOptions& options, const TlsOptions& tls,
    AuthorizationMetrics* metrics, const AdminAudit* audit) {
  if (tls.client_ca_file.empty()) {
    // Refuse rather than serve: a policy that no call can be checked
    // against would look like protection and be none.
    return absl::InvalidArgumentError(absl::StrCat(
        "--authz_policy=", options.policy_file,
        " needs mutual TLS (--tls_cert, --tls_key and --tls_client_ca): "
        "the serving port is ",
        TlsModeName(tls), ", so no caller has a certificate identity"));
  }
  absl::StatusOr<AuthorizationPolicy> policy =
      AuthorizationPolicy::Load(options.policy_file);
  if (!policy.ok()) return policy.status();
  return std::make_shared<RpcAuthorizer>(*std::move(policy), metrics, audit);
}

RpcAuthorizer::RpcAuthorizer(AuthorizationPolicy policy,
                             AuthorizationMetrics* metrics,
                             const AdminAudit* audit)
    : policy_(std::move(policy)), metrics_(metrics), audit_(audit) {}

grpc::Status RpcAuthorizer::Authorize(
    absl::string_view path, absl::Span<const std::string> identities) const {
  const RpcAccess access = AccessFor(path);
  if (access.open) return grpc::Status::OK;
  if (policy_.Grantee(identities, access.role) != nullptr) {
    return grpc::Status::OK;
  }
  metrics_->CountDenied(access.index);
  // The client's own method name or path; an unknown path is echoed to
  // the caller who sent it, never used as a metric label.
  const std::string rpc =
      access.index == 0 ? std::string(path) : std::string(access.rpc);
  std::string message =
      absl::StrCat(rpc, " needs role \"", RoleName(access.role), "\"; ");
  if (identities.empty()) {
    absl::StrAppend(&message, "the client presented no certificate");
  } else {
    // The caller's own identity helps it see which certificate the server
    // got; who does hold the role is never said.
    absl::StrAppend(&message, "the client certificate (", identities.front(),
                    ") is not granted it");
  }
  const std::string identity = LoggedIdentity(identities, nullptr);
  if (access.role == Role::kAdmin && access.index != 0) {
    AdminAuditRecord record;
    record.rpc = access.rpc;
    record.identity = identity;
    record.code = static_cast<int>(grpc::StatusCode::PERMISSION_DENIED);
    record.detail = message;
    audit_->Record(record);
  } else {
    uint64_t suppressed = 0;
    if (denial_log_.Allow(&suppressed)) {
      spdlog::warn(
          "event=rpc_denied rpc={} role={} identity={} suppressed={} "
          "msg=\"the client certificate lacks the role (--authz_policy)\"",
          std::string(access.rpc), RoleName(access.role), LogQuoted(identity),
          suppressed);
    }
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, message);
}

grpc::Status RpcAuthorizer::Process(const InputMetadata& auth_metadata,
                                    grpc::AuthContext* context,
                                    OutputMetadata* /*consumed_auth_metadata*/,
                                    OutputMetadata* /*response_metadata*/) {
  absl::string_view path;
  if (auto it = auth_metadata.find(":path"); it != auth_metadata.end()) {
    path = absl::string_view(it->second.data(), it->second.size());
  }
  // Probes and reflection skip reading the certificate.
  if (AccessFor(path).open) return grpc::Status::OK;
  if (context == nullptr) return Authorize(path, {});
  const std::shared_ptr<const std::vector<std::string>> identities =
      identities_.Get(*context);
  return Authorize(path, *identities);
}

void LogAuthorizationMode(const AuthorizationOptions& options,
                          const TlsOptions& tls,
                          const RpcAuthorizer* authorizer) {
  if (authorizer != nullptr) {
    spdlog::info(
        "event=authorization mode=on policy={} identities={} tls={} "
        "audit_hash_user_ids={}",
        LogQuoted(options.policy_file), authorizer->policy().identities(),
        TlsModeName(tls), options.audit_hash_user_ids);
    return;
  }
  // Authorization off is a warning, and an error when client certificates
  // are verified: an operator who set up mTLS most likely meant to grant
  // roles, and at --log_level=error an info line would leave nothing
  // saying that any certificate the CA signed may delete users.
  const bool client_certs = !tls.client_ca_file.empty();
  spdlog::log(
      client_certs ? spdlog::level::err : spdlog::level::warn,
      "event=authorization mode=off tls={} audit_hash_user_ids={} "
      "msg=\"no --authz_policy: every client that can connect may call "
      "every RPC{}\"",
      TlsModeName(tls), options.audit_hash_user_ids,
      client_certs ? ", DeleteUser included, whatever its certificate" : "");
}

}  // namespace exposure_filter
