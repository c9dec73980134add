#include "src/server/security/tls_credentials.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace exposure_filter {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// PEM files are small; anything past this is not a certificate bundle and
// reading it whole would be a way to make startup allocate without bound.
constexpr long kMaxPemBytes = 4 << 20;

std::string FlagPath(const char* flag, const std::string& path) {
  return absl::StrCat("--", flag, "=", path);
}

absl::StatusOr<std::string> ReadPemFile(const char* flag,
                                        const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        FlagPath(flag, path), ": cannot read: ", std::strerror(errno)));
  }
  std::string data;
  char buf[8192];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    data.append(buf, n);
    if (static_cast<long>(data.size()) > kMaxPemBytes) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int read_errno = errno;
  std::fclose(f);
  if (failed) {
    return absl::InvalidArgumentError(absl::StrCat(
        FlagPath(flag, path), ": cannot read: ", std::strerror(read_errno)));
  }
  if (static_cast<long>(data.size()) > kMaxPemBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(FlagPath(flag, path), ": larger than ", kMaxPemBytes,
                     " bytes, not a PEM file"));
  }
  return data;
}

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The certificates of a PEM bundle in order; an error if there are none.
absl::StatusOr<std::vector<X509Ptr>> ParseCertificates(const char* flag,
                                                       const std::string& path,
                                                       const std::string& pem) {
  std::vector<X509Ptr> certs;
  BioPtr bio = MemoryBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(x);
  }
  // The loop ends on a "no start line" error at the end of the data; that is
  // not a failure once at least one certificate was read.
  ERR_clear_error();
  if (certs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        FlagPath(flag, path),
        ": no PEM certificate (expected -----BEGIN CERTIFICATE-----)"));
  }
  return certs;
}

// A passphrase callback that refuses: the server has no terminal to ask on,
// and OpenSSL's default callback would block reading one.
int NoPassphrase(char*, int, int, void*) { return -1; }

absl::StatusOr<PkeyPtr> ParsePrivateKey(const std::string& path,
                                        const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  PkeyPtr key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        FlagPath("tls_key", path),
        ": no unencrypted PEM private key (encrypted keys are not supported)"));
  }
  return key;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsOptions& tls) {
  if (!tls.enabled()) {
    if (!tls.key_file.empty() || !tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_key and --tls_client_ca need --tls_cert");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert needs --tls_key");
  }
  absl::StatusOr<std::string> cert_pem = ReadPemFile("tls_cert", tls.cert_file);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = ReadPemFile("tls_key", tls.key_file);
  if (!key_pem.ok()) return key_pem.status();
  absl::StatusOr<std::vector<X509Ptr>> chain =
      ParseCertificates("tls_cert", tls.cert_file, *cert_pem);
  if (!chain.ok()) return chain.status();
  absl::StatusOr<PkeyPtr> key = ParsePrivateKey(tls.key_file, *key_pem);
  if (!key.ok()) return key.status();
  // The first certificate of the chain is the server's own (leaf); its public
  // key must be the private key's, or every handshake would fail.
  X509* leaf = chain->front().get();
  if (X509_check_private_key(leaf, key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(FlagPath("tls_key", tls.key_file),
                     ": does not match the first certificate in ",
                     FlagPath("tls_cert", tls.cert_file)));
  }
  // An expired certificate still loads (rotation may be about to replace
  // it), but every client will refuse it: say so once, loudly.
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
    spdlog::warn(
        "{}: the server certificate has expired; clients will refuse "
        "the handshake",
        FlagPath("tls_cert", tls.cert_file));
  }

  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca_pem =
        ReadPemFile("tls_client_ca", tls.client_ca_file);
    if (!ca_pem.ok()) return ca_pem.status();
    absl::StatusOr<std::vector<X509Ptr>> cas =
        ParseCertificates("tls_client_ca", tls.client_ca_file, *ca_pem);
    if (!cas.ok()) return cas.status();
    options.pem_root_certs = *ca_pem;
    options.client_certificate_request =
        tls.require_client_cert
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace exposure_filter
