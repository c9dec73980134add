// Which role each RPC needs. Roles group RPCs by client kind:
//   read   recall servers: FilterRecalled, GetFilter, GetUserStats, Explain,
//          Session
//   write  the exposure logger: RecordExposure
//   admin  operators: DeleteUser (erases a user's history), the traced-user
//          RPCs (exact exposure lists), GetServerStats (capacity, surfaces)
// grpc.health.v1 and server reflection stay open to every client. Any other
// path, including an exposure.v1 method missing from the table, needs
// admin: a new RPC is closed until someone decides who may call it.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_RPC_ROLES_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_RPC_ROLES_H_

#include <cstddef>

#include "absl/strings/string_view.h"
#include "src/server/security/authorization_policy.h"

namespace exposure_filter {

struct RpcAccess {
  // Method name ("DeleteUser"), or "unknown" for paths outside the table
  // (never the path the client sent: it would let clients mint labels).
  absl::string_view rpc;
  bool open = false;         // health, reflection: no role needed
  Role role = Role::kAdmin;  // needed unless open
  // 0 for unknown, 1..kNumRoleRpcs for the table's methods: the index of
  // the rpc's counters (authorization_metrics.h).
  size_t index = 0;
};

inline constexpr absl::string_view kExposureFilterService =
    "exposure.v1.ExposureFilter";

// The access rule of a call to `path` ("/exposure.v1.ExposureFilter/
// DeleteUser", as in :path).
RpcAccess AccessFor(absl::string_view path);

// The exposure.v1 methods with a role, in index order (1..).
inline constexpr size_t kNumRoleRpcs = 11;
const RpcAccess& RoleRpc(size_t index);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_RPC_ROLES_H_
