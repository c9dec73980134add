// RpcAuthorizer: decides, before a call's request is read,
// whether the caller's client certificate holds the role the RPC needs
// (rpc_roles.h) under the --authz_policy file (authorization_policy.h).
//
// It is a grpc::AuthMetadataProcessor: gRPC's server auth filter runs it on
// every call of a secure port with the call's :path and the connection's
// verified peer certificate, and a non-OK status ends the call there, so a
// refused call never reaches a handler, the admission gate or the store,
// and its request is never parsed. A refused call gets PERMISSION_DENIED
// naming the RPC and the role it needs, never who holds it; it is counted
// (authorization_metrics.h); a refused admin RPC writes its audit line
// (admin_audit.h), other refusals one rate-limited warning per interval.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_RPC_AUTHORIZER_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_RPC_AUTHORIZER_H_

#include <grpcpp/security/auth_metadata_processor.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/base/log_rate_limiter.h"
#include "src/server/config/server_config.h"
#include "src/server/security/admin_audit.h"
#include "src/server/security/authorization_metrics.h"
#include "src/server/security/authorization_policy.h"
#include "src/server/security/caller_identity.h"

namespace exposure_filter {

class RpcAuthorizer final : public grpc::AuthMetadataProcessor {
 public:
  // Loads options.policy_file. Authorization needs identities, so it fails
  // unless `tls` is mutual TLS (plaintext, or TLS without --tls_client_ca,
  // would leave every call without one). `metrics` and `audit` must
  // outlive the authorizer.
  static absl::StatusOr<std::shared_ptr<RpcAuthorizer>> Create(
      const AuthorizationOptions& options, const TlsOptions& tls,
      AuthorizationMetrics* metrics, const AdminAudit* audit);

  RpcAuthorizer(AuthorizationPolicy policy, AuthorizationMetrics* metrics,
                const AdminAudit* audit);

  // OK, or PERMISSION_DENIED for a call to `path` by a caller proving
  // `identities` (caller_identity.h). Counts and logs refusals.
  grpc::Status Authorize(absl::string_view path,
                         absl::Span<const std::string> identities) const;

  const AuthorizationPolicy& policy() const { return policy_; }

  // Cheap and non-blocking: runs inline on gRPC's thread, not on the
  // processor's thread pool.
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata,
                       grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const AuthorizationPolicy policy_;
  CallerIdentityCache identities_;
  AuthorizationMetrics* const metrics_;
  const AdminAudit* const audit_;
  // A client with the wrong certificate retries at full speed: one warning
  // per interval, with the count it stood for.
  mutable LogRateLimiter denial_log_{absl::Seconds(10)};
};

// One startup line: authorization on (the policy, how many identities) or
// off and why, so an operator reading the log knows which it is.
void LogAuthorizationMode(const AuthorizationOptions& options,
                          const TlsOptions& tls,
                          const RpcAuthorizer* authorizer);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_RPC_AUTHORIZER_H_
