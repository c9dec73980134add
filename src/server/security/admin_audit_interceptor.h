// A server interceptor that writes AdminAudit's line for every admin RPC
// that reaches the service: at PRE_SEND_STATUS it has the
// caller's certificate identity (ServerContext::auth_context), the request
// (the call's message holder) and the outcome; a call that ends without a
// status (client gone, deadline) is logged as CANCELLED without request
// fields. Admin calls refused by authorization never reach the service;
// RpcAuthorizer writes their line. Other RPCs get no interceptor at all.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_ADMIN_AUDIT_INTERCEPTOR_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_ADMIN_AUDIT_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "src/server/security/admin_audit.h"
#include "src/server/security/authorization_policy.h"

namespace exposure_filter {

// `policy` (null when authorization is off) picks the identity the line
// names. Both must outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewAdminAuditInterceptorFactory(const AdminAudit* audit,
                                const AuthorizationPolicy* policy);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_ADMIN_AUDIT_INTERCEPTOR_H_
