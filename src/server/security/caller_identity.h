// The identities a caller's client certificate proves, in the form
// AuthorizationPolicy grants roles to (peer_certificate.h): "dns:", "uri:",
// "email:", "ip:" for each subjectAltName, then "cn:" for the subject common
// name, read from the verified peer certificate itself (the AuthContext's
// x509_pem_cert). gRPC has verified the chain to --tls_client_ca before any
// of this is read. Empty without a client certificate (plaintext, TLS
// without --tls_client_ca, or an optional certificate not presented), and
// empty for a certificate whose names cannot be read (logged, rate-limited):
// such a caller is refused whatever the policy grants.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_CALLER_IDENTITY_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_CALLER_IDENTITY_H_

#include <grpcpp/security/auth_context.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace exposure_filter {

std::vector<std::string> CallerIdentities(const grpc::AuthContext& context);

// CallerIdentities once per distinct certificate: the authorizer runs on
// every call, and a client's calls all carry the certificate of its
// connection, so parsing it again per call would be work done many times
// for one answer. Thread-safe.
class CallerIdentityCache {
 public:
  std::shared_ptr<const std::vector<std::string>> Get(
      const grpc::AuthContext& context);

 private:
  // A server sees a few certificates per client kind, one more per
  // rotation; past this many (about 1 MB of PEM) the cache starts over
  // rather than grow with whatever clients present.
  static constexpr size_t kMaxCertificates = 1024;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string,
                      std::shared_ptr<const std::vector<std::string>>>
      by_pem_ ABSL_GUARDED_BY(mu_);
};

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
