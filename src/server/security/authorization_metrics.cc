#include "src/server/security/authorization_metrics.h"

#include <string>

#include "src/server/observability/metric_families.h"

namespace exposure_filter {

std::vector<prometheus::MetricFamily> AuthorizationMetrics::Collect() const {
  using prometheus::MetricType;
  prometheus::MetricFamily enabled =
      MakeFamily("exposure_filter_authorization_enabled",
                 "1 when calls are authorized by client certificate "
                 "identity (--authz_policy), 0 when every client may call "
                 "every RPC",
                 MetricType::Gauge);
  AddSample(enabled, {}, enabled_ ? 1 : 0);
  prometheus::MetricFamily denied = MakeFamily(
      "exposure_filter_rpcs_denied_total",
      "calls refused PERMISSION_DENIED by --authz_policy, by RPC and the "
      "role it needs",
      MetricType::Counter);
  // Every series exists from the first scrape, so rate() sees the first
  // denial.
  for (size_t i = 0; i <= kNumRoleRpcs; ++i) {
    const RpcAccess& rpc = RoleRpc(i);
    AddSample(denied,
              {{"rpc", std::string(rpc.rpc)}, {"role", RoleName(rpc.role)}},
              static_cast<double>(this->denied(i)));
  }
  return {std::move(enabled), std::move(denied)};
}

}  // namespace exposure_filter
