#include "src/server/security/authorization_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>

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

// The subjectAltName type an untyped "san:" value most likely meant, for
// the message that refuses it: a URI has a scheme, an e-mail address an
// '@', an IP address parses as one; anything else is a DNS name.
absl::string_view LikelySanKind(absl::string_view value) {
  if (absl::StrContains(value, "://")) return "uri";
  if (absl::StrContains(value, '@')) return "email";
  unsigned char addr[sizeof(struct in6_addr)];
  const std::string text(value);
  if (inet_pton(AF_INET, text.c_str(), addr) == 1 ||
      inet_pton(AF_INET6, text.c_str(), addr) == 1) {
    return "ip";
  }
  return "dns";
}

// `identity` in the form caller_identity.h reads from certificates, so a
// grant is one hash lookup: DNS names in ASCII lowercase, IP addresses as
// inet_ntop writes them ("10.0.0.7", "2001:db8::1"); URIs, e-mail
// addresses and common names byte for byte. An error says what is wrong
// with it, without the line (the caller adds that).
absl::StatusOr<std::string> CanonicalIdentity(absl::string_view identity) {
  const size_t colon = identity.find(':');
  const absl::string_view kind = identity.substr(0, colon);
  const absl::string_view value = colon == absl::string_view::npos
                                      ? absl::string_view()
                                      : identity.substr(colon + 1);
  if (kind == "san" && colon != absl::string_view::npos && !value.empty()) {
    // "san:" matched any subjectAltName type, so a certificate whose CA let
    // its requester choose an e-mail or URI name could claim a DNS name's
    // roles. Which type was meant is the operator's to say, not a guess.
    return absl::InvalidArgumentError(absl::StrCat(
        "identity \"", absl::CHexEscape(identity),
        "\" does not say which subjectAltName type it is; write \"",
        LikelySanKind(value), ":", absl::CHexEscape(value),
        "\" (dns:, uri:, email: or ip:)"));
  }
  const bool known = kind == "dns" || kind == "uri" || kind == "email" ||
                     kind == "ip" || kind == "cn";
  if (colon == absl::string_view::npos || !known || value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "identity \"", absl::CHexEscape(identity),
        "\" must be dns:<name>, uri:<uri>, email:<address>, ip:<address> "
        "or cn:<common name>"));
  }
  if (kind == "dns") {
    // No wildcard matching: "*.example.test" would match only a
    // certificate carrying that very SAN, which is not what the line says.
    if (absl::StrContains(value, '*')) {
      return absl::InvalidArgumentError(
          absl::StrCat("identity \"", absl::CHexEscape(identity),
                       "\": wildcards are not supported, name each DNS name"));
    }
    return absl::StrCat("dns:", absl::AsciiStrToLower(value));
  }
  if (kind == "ip") {
    const std::string text(value);
    unsigned char addr[sizeof(struct in6_addr)];
    const int family = absl::StrContains(value, ':') ? AF_INET6 : AF_INET;
    char canonical[INET6_ADDRSTRLEN];
    if (inet_pton(family, text.c_str(), addr) != 1 ||
        inet_ntop(family, addr, canonical, sizeof(canonical)) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("identity \"", absl::CHexEscape(identity),
                       "\": not an IPv4 or IPv6 address"));
    }
    return absl::StrCat("ip:", canonical);
  }
  return std::string(identity);
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
    absl::StatusOr<std::string> identity = CanonicalIdentity(fields[1]);
    if (!identity.ok()) return error(identity.status().message());
    policy.roles_[*std::move(identity)] |= bits;
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
