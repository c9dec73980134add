// The identities a caller's client certificate proves, in the
// form AuthorizationPolicy grants roles to: "san:<value>" for each
// subjectAltName gRPC reports (DNS, URI, e-mail, IP), then "cn:<value>" for
// the subject common name. gRPC has verified the chain to --tls_client_ca
// before any of this is read. Empty without a client certificate
// (plaintext, TLS without --tls_client_ca, or an optional certificate not
// presented).
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_CALLER_IDENTITY_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_CALLER_IDENTITY_H_

#include <grpcpp/security/auth_context.h>

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace exposure_filter {

std::vector<std::string> CallerIdentities(const grpc::AuthContext& context);

// The identity a log line names: `grantee` when a policy granted the call,
// else the first identity, else "-".
std::string LoggedIdentity(absl::Span<const std::string> identities,
                           const std::string* grantee);

// `value` for a double-quoted logfmt field: '"', '\\' and bytes outside
// printable ASCII as \xHH, so a client-chosen string (a user id, a
// certificate name) cannot forge fields or lines.
std::string LogQuoted(absl::string_view value);
// The same escaping without the quotes; bytes in `also` are escaped too
// (',' for the elements of a list field).
std::string LogEscaped(absl::string_view value, absl::string_view also = "");

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_CALLER_IDENTITY_H_
