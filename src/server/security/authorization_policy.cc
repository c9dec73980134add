#include "src/server/security/authorization_policy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace exposure_filter {
namespace {

constexpr size_t kMaxPolicyBytes = 1 << 20;

constexpr const char* kRoleNames[kNumRoles] = {"read", "write", "admin"};

uint8_t Bit(int role) { return static_cast<uint8_t>(1u << role); }

bool ValidIdentity(absl::string_view identity) {
  for (absl::string_view prefix : {"san:", "cn:"}) {
    if (absl::StartsWith(identity, prefix) && identity.size() > prefix.size()) {
      return true;
    }
  }
  return false;
}

}  // namespace

const char* RoleName(Role role) { return kRoleNames[static_cast<int>(role)]; }

absl::StatusOr<AuthorizationPolicy> AuthorizationPolicy::Parse(
    absl::string_view text, absl::string_view source) {
  AuthorizationPolicy policy;
  // Editors on some systems start a UTF-8 file with a byte order mark; it
  // is not part of the first role, and left in it would be refused as an
  // unknown role whose name prints as "admin".
  absl::ConsumePrefix(&text, "\xEF\xBB\xBF");
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    auto error = [&](auto&&... parts) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " line ", line_number, ": ", parts...));
    };
    // Roles and identities are printable text: a control byte (a NUL in an
    // identity, say) would make an entry that no certificate ever matches,
    // silently. Messages print the line escaped, so what is wrong shows.
    for (char c : line) {
      if (absl::ascii_iscntrl(static_cast<unsigned char>(c)) && c != '\t' &&
          c != '\r') {
        return error("control byte \\x",
                     absl::BytesToHexString(absl::string_view(&c, 1)), " in \"",
                     absl::CHexEscape(line),
                     "\": roles and identities are printable text");
      }
    }
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return error("expected \"<role>[,<role>...] <identity>\", got ",
                   fields.size(), " fields in \"", absl::CHexEscape(line),
                   "\"");
    }
    uint8_t bits = 0;
    for (absl::string_view name : absl::StrSplit(fields[0], ',')) {
      int role = 0;
      while (role < kNumRoles && name != kRoleNames[role]) ++role;
      if (role == kNumRoles) {
        return error("unknown role \"", absl::CHexEscape(name),
                     "\" (roles: read, write, admin)");
      }
      bits |= Bit(role);
    }
    if (!ValidIdentity(fields[1])) {
      return error("identity \"", absl::CHexEscape(fields[1]),
                   "\" must be san:<subjectAltName> or cn:<common name>");
    }
    policy.roles_[fields[1]] |= bits;
  }
  if (policy.roles_.empty()) {
    // An empty or all-comment file denies everything: far more likely a
    // wrong or truncated mount than an intended lockout.
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": grants no role to any identity"));
  }
  return policy;
}

absl::StatusOr<AuthorizationPolicy> AuthorizationPolicy::Load(
    const std::string& path) {
  const std::string source = absl::StrCat("--authz_policy=", path);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": cannot read: ", std::strerror(errno)));
  }
  std::string text;
  char buf[8192];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    text.append(buf, n);
    // A policy is a few lines per client kind; a huge file is a mistake
    // (the wrong path), not a policy.
    if (text.size() > kMaxPolicyBytes) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int read_errno = errno;
  std::fclose(f);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": cannot read: ", std::strerror(read_errno)));
  }
  if (text.size() > kMaxPolicyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": larger than ", kMaxPolicyBytes, " bytes, not a policy"));
  }
  return Parse(text, source);
}

const std::string* AuthorizationPolicy::Grantee(
    absl::Span<const std::string> identities, Role role) const {
  for (const std::string& identity : identities) {
    auto it = roles_.find(identity);
    if (it != roles_.end() && (it->second & Bit(static_cast<int>(role)))) {
      return &identity;
    }
  }
  return nullptr;
}

}  // namespace exposure_filter
