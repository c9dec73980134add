// Transport credentials of the serving port: plaintext, TLS, or mutual TLS,
// from the PEM files named by TlsOptions (flags --tls_cert, --tls_key,
// --tls_client_ca, --tls_require_client_cert).
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_TLS_CREDENTIALS_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_TLS_CREDENTIALS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "absl/status/statusor.h"
#include "src/server/config/server_config.h"

namespace exposure_filter {

// Reads and checks the files before gRPC sees them, because gRPC only logs
// "unable to create secure server" and refuses the port without saying which
// file is wrong. Errors name the flag and the path: unreadable file, no PEM
// certificate, no (or an encrypted) PEM private key, a key that does not
// belong to the certificate, an empty client CA bundle. Insecure credentials
// when TLS is off.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsOptions& tls);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_TLS_CREDENTIALS_H_
