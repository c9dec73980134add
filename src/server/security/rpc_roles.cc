#include "src/server/security/rpc_roles.h"

#include "absl/strings/match.h"

namespace exposure_filter {
namespace {

// Index 0 is "unknown"; the roles of rpc_roles.h, one line per RPC.
constexpr RpcAccess kRpcs[kNumRoleRpcs + 1] = {
    {"unknown", false, Role::kAdmin, 0},
    {"FilterRecalled", false, Role::kRead, 1},
    {"GetFilter", false, Role::kRead, 2},
    {"GetUserStats", false, Role::kRead, 3},
    {"Explain", false, Role::kRead, 4},
    {"RecordExposure", false, Role::kWrite, 5},
    {"DeleteUser", false, Role::kAdmin, 6},
    {"AddTracedUsers", false, Role::kAdmin, 7},
    {"RemoveTracedUsers", false, Role::kAdmin, 8},
    {"ListTracedUsers", false, Role::kAdmin, 9},
    {"GetServerStats", false, Role::kAdmin, 10},
    // Subscriptions to users' filters and mode A: what recall servers read.
    {"Session", false, Role::kRead, 11},
};

// Services every client may use: probes (Kubernetes, load balancers) and
// grpcurl's discovery carry no user data.
constexpr absl::string_view kOpenServices[] = {
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
};

}  // namespace

RpcAccess AccessFor(absl::string_view path) {
  for (absl::string_view open : kOpenServices) {
    if (absl::StartsWith(path, open)) {
      return RpcAccess{"open", true, Role::kAdmin, 0};
    }
  }
  // "/exposure.v1.ExposureFilter/" + method; ten entries: a linear scan of
  // short strings costs less than hashing the path.
  if (path.size() > kExposureFilterService.size() + 2 && path[0] == '/' &&
      path.substr(1, kExposureFilterService.size()) == kExposureFilterService &&
      path[kExposureFilterService.size() + 1] == '/') {
    const absl::string_view method =
        path.substr(kExposureFilterService.size() + 2);
    for (size_t i = 1; i <= kNumRoleRpcs; ++i) {
      if (kRpcs[i].rpc == method) return kRpcs[i];
    }
  }
  return kRpcs[0];
}

const RpcAccess& RoleRpc(size_t index) {
  return kRpcs[index <= kNumRoleRpcs ? index : 0];
}

}  // namespace exposure_filter
