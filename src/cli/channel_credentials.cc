#include "src/cli/channel_credentials.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace exposure_filter::cli {
namespace {

absl::StatusOr<std::string> ReadFile(const CliArgs& args, const char* option) {
  const std::string path = args.Get(option, "");
  FILE* f = std::fopen(path.c_str(), "rb");
  std::string data;
  if (f != nullptr) {
    char buf[8192];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
    const bool failed = std::ferror(f) != 0;
    const int read_errno = errno;
    std::fclose(f);
    if (!failed) return data;
    errno = read_errno;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--", option, "=", path, ": cannot read: ", std::strerror(errno)));
}

}  // namespace

std::vector<OptionSpec> TlsOptions() {
  return {
      {"tls_ca", "FILE",
       "PEM CA bundle the server certificate must chain to; turns TLS on "
       "(default: plaintext)"},
      {"tls_cert", "FILE",
       "PEM client certificate for mutual TLS (with --tls_key and --tls_ca)"},
      {"tls_key", "FILE", "PEM private key of --tls_cert"},
      {"tls_server_name", "NAME",
       "check the server certificate for NAME instead of the --address host "
       "(e.g. when dialling 127.0.0.1)"},
  };
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const CliArgs& args) {
  const bool tls = args.Has("tls_ca");
  if (!tls) {
    for (const char* option : {"tls_cert", "tls_key", "tls_server_name"}) {
      if (args.Has(option)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", option, " needs --tls_ca"));
      }
    }
    return grpc::InsecureChannelCredentials();
  }
  if (args.Has("tls_cert") != args.Has("tls_key")) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key must be given together");
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadFile(args, "tls_ca");
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *std::move(ca);
  if (args.Has("tls_cert")) {
    absl::StatusOr<std::string> cert = ReadFile(args, "tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(args, "tls_key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

}  // namespace exposure_filter::cli
