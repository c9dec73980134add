// AuthorizationPolicy: which client identities hold which roles,
// parsed from the --authz_policy file. One grant per line:
//
//   # comment
//   <role>[,<role>...]  <identity>
//
// roles: read, write, admin (rpc_roles.h says which RPCs each allows; no
// role implies another). identity: a name the client certificate proves,
// typed, because a CA that lets a requester choose one kind of name must
// not thereby grant another kind's roles:
//   dns:<name>     a DNS subjectAltName, compared in ASCII lowercase, no
//                  wildcards
//   uri:<uri>      a URI subjectAltName, e.g. a SPIFFE ID
//                  uri:spiffe://example.org/ns/x/sa/y
//   email:<addr>   an e-mail (rfc822Name) subjectAltName
//   ip:<addr>      an IP address subjectAltName, IPv4 or IPv6, any spelling
//                  inet_pton reads ("ip:2001:db8:0::1" is "ip:2001:db8::1")
//   cn:<name>      the subject common name (only spaces-free names)
// An identity on several lines holds the union of their roles; a caller
// whose certificate carries several identities holds the union of theirs.
// Anything else is an error naming the line: a third field, an unknown
// role, an identity of another kind, including the untyped "san:<value>"
// (the message names the typed form to write instead), a DNS wildcard, an
// unparsable IP address, a file that grants nothing.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_AUTHORIZATION_POLICY_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_AUTHORIZATION_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace exposure_filter {

enum class Role : uint8_t { kRead = 0, kWrite = 1, kAdmin = 2 };
inline constexpr int kNumRoles = 3;

// "read", "write", "admin".
const char* RoleName(Role role);

class AuthorizationPolicy {
 public:
  // Parses policy text; `source` prefixes errors (e.g.
  // "--authz_policy=/etc/ef/policy"), followed by " line N: ...".
  static absl::StatusOr<AuthorizationPolicy> Parse(absl::string_view text,
                                                   absl::string_view source);
  // Reads and parses the file; errors name the flag and the path.
  static absl::StatusOr<AuthorizationPolicy> Load(const std::string& path);

  // The first of `identities` (typed and canonical, as caller_identity.h
  // reads them from a certificate) that holds `role`, or nullptr when none
  // does.
  const std::string* Grantee(absl::Span<const std::string> identities,
                             Role role) const;

  // Distinct identities with at least one role.
  size_t identities() const { return roles_.size(); }

 private:
  using RoleBits = uint8_t;
  absl::flat_hash_map<std::string, RoleBits> roles_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_AUTHORIZATION_POLICY_H_
