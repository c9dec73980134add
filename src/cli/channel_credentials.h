// Transport security of the CLI's channel: plaintext by default;
// TLS with --tls_ca (the CA bundle the server certificate must chain to);
// mutual TLS with --tls_cert and --tls_key as well. --tls_server_name is
// the name the server certificate is checked against when the address does
// not carry it (a probe dialling 127.0.0.1 inside the pod).
#ifndef EXPOSURE_FILTER_SRC_CLI_CHANNEL_CREDENTIALS_H_
#define EXPOSURE_FILTER_SRC_CLI_CHANNEL_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>

#include <memory>

#include "absl/status/statusor.h"
#include "src/cli/cli_args.h"

namespace exposure_filter::cli {

// The --tls_* options, for CommonOptions().
std::vector<OptionSpec> TlsOptions();

// Reads the PEM files; InvalidArgument naming the option and the path when
// one cannot be read or the options do not pair up.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const CliArgs& args);

}  // namespace exposure_filter::cli

#endif  // EXPOSURE_FILTER_SRC_CLI_CHANNEL_CREDENTIALS_H_
