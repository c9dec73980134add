#include "src/server/security/caller_identity.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace exposure_filter {
namespace {

// gRPC's names for the verified peer certificate's fields
// (grpc_security_constants.h: GRPC_X509_SAN_PROPERTY_NAME,
// GRPC_X509_CN_PROPERTY_NAME).
constexpr char kSanProperty[] = "x509_subject_alternative_name";
constexpr char kCnProperty[] = "x509_common_name";

}  // namespace

std::vector<std::string> CallerIdentities(const grpc::AuthContext& context) {
  std::vector<std::string> identities;
  for (const grpc::string_ref& san : context.FindPropertyValues(kSanProperty)) {
    identities.push_back(
        absl::StrCat("san:", absl::string_view(san.data(), san.size())));
  }
  for (const grpc::string_ref& cn : context.FindPropertyValues(kCnProperty)) {
    identities.push_back(
        absl::StrCat("cn:", absl::string_view(cn.data(), cn.size())));
  }
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
