// AuthorizationMetrics, on /metrics:
//   exposure_filter_authorization_enabled              1 with --authz_policy
//   exposure_filter_rpcs_denied_total{rpc,role}        calls refused
//       PERMISSION_DENIED, by RPC and the role it needs; rpc="unknown" for
//       paths outside exposure.v1 (never the path the client sent). Never
//       a caller identity or user id as a label.
// Refused calls end in the transport's auth filter before a method handler
// exists, so grpc_server_handled_total does not count them: this does.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_AUTHORIZATION_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_AUTHORIZATION_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "src/server/security/rpc_roles.h"

namespace exposure_filter {

class AuthorizationMetrics final : public prometheus::Collectable {
 public:
  explicit AuthorizationMetrics(bool enabled) : enabled_(enabled) {}

  // `rpc_index`: RpcAccess::index.
  void CountDenied(size_t rpc_index) {
    denied_[rpc_index <= kNumRoleRpcs ? rpc_index : 0].fetch_add(
        1, std::memory_order_relaxed);
  }
  uint64_t denied(size_t rpc_index) const {
    return denied_[rpc_index].load(std::memory_order_relaxed);
  }

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const bool enabled_;
  std::atomic<uint64_t> denied_[kNumRoleRpcs + 1] = {};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_AUTHORIZATION_METRICS_H_
