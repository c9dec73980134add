#include "src/server/security/caller_identity.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/base/log_rate_limiter.h"
#include "src/server/security/peer_certificate.h"

namespace exposure_filter {
namespace {

// gRPC's name for the verified peer certificate, PEM
// (grpc_security_constants.h: GRPC_X509_PEM_CERT_PROPERTY_NAME).
constexpr char kPemCertProperty[] = "x509_pem_cert";

// A client whose certificate cannot be read retries at full speed: one
// warning per interval, with the count it stood for.
LogRateLimiter& UnreadableCertificateLog() {
  static LogRateLimiter* const limiter = new LogRateLimiter(absl::Seconds(10));
  return *limiter;
}

absl::string_view PemOf(const grpc::AuthContext& context) {
  const std::vector<grpc::string_ref> pems =
      context.FindPropertyValues(kPemCertProperty);
  if (pems.empty()) return absl::string_view();
  return absl::string_view(pems.front().data(), pems.front().size());
}

std::vector<std::string> IdentitiesOf(absl::string_view pem) {
  if (pem.empty()) return {};
  absl::StatusOr<std::vector<std::string>> identities =
      CertificateIdentities(pem);
  if (identities.ok()) return *std::move(identities);
  uint64_t suppressed = 0;
  if (UnreadableCertificateLog().Allow(&suppressed)) {
    spdlog::warn(
        "event=client_certificate_unreadable error={} suppressed={} "
        "msg=\"the verified client certificate proves no identity; its "
        "calls are refused as from a caller without a certificate\"",
        LogQuoted(identities.status().message()), suppressed);
  }
  return {};
}

}  // namespace

std::vector<std::string> CallerIdentities(const grpc::AuthContext& context) {
  return IdentitiesOf(PemOf(context));
}

std::shared_ptr<const std::vector<std::string>> CallerIdentityCache::Get(
    const grpc::AuthContext& context) {
  const absl::string_view pem = PemOf(context);
  {
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = by_pem_.find(pem); it != by_pem_.end()) return it->second;
  }
  // Parsed outside the lock; two callers racing on a new certificate both
  // parse it and store the same answer.
  auto identities =
      std::make_shared<const std::vector<std::string>>(IdentitiesOf(pem));
  absl::MutexLock lock(&mu_);
  if (by_pem_.size() >= kMaxCertificates) by_pem_.clear();
  by_pem_.emplace(pem, identities);
  return identities;
}

std::string LoggedIdentity(absl::Span<const std::string> identities,
                           const std::string* grantee) {
  if (grantee != nullptr) return *grantee;
  return identities.empty() ? "-" : identities.front();
}

std::string LogEscaped(absl::string_view value, absl::string_view also) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e || c == '"' || c == '\\' ||
        also.find(c) != absl::string_view::npos) {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string LogQuoted(absl::string_view value) {
  return absl::StrCat("\"", LogEscaped(value), "\"");
}

}  // namespace exposure_filter
