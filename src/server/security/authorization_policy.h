// AuthorizationPolicy: which client identities hold which roles,
// parsed from the --authz_policy file. One grant per line:
//
//   # comment
//   <role>[,<role>...]  <identity>
//
// roles: read, write, admin (rpc_roles.h says which RPCs each allows; no
// role implies another). identity: the client certificate's
//   san:<value>  a subjectAltName, as gRPC reports it: a DNS name, a URI
//                (e.g. a SPIFFE ID spiffe://example.org/ns/x/sa/y), an
//                e-mail address or an IP address
//   cn:<value>   the subject common name (only spaces-free names)
// An identity on several lines holds the union of their roles; a caller
// whose certificate carries several identities holds the union of theirs.
// Anything else (a third field, an unknown role, an identity without
// san:/cn:, a file that grants nothing) is an error naming the line.
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

  // The first of `identities` ("san:..."/"cn:...", caller_identity.h) that
  // holds `role`, or nullptr when none does.
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
