// AdminHttpServer: the admin HTTP port (--admin_listen) serving Prometheus
// metrics at /metrics (prometheus-cpp's civetweb Exposer). It is a separate
// port from gRPC so it can stay on localhost or a private interface while
// the gRPC port is exposed, and so scrapes never queue behind RPCs.
#ifndef EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_ADMIN_HTTP_SERVER_H_
#define EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_ADMIN_HTTP_SERVER_H_

#include <prometheus/collectable.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace prometheus {
class Exposer;
}

namespace exposure_filter {

class AdminHttpServer {
 public:
  // `address` is host:port with a numeric host or "localhost" ("[::1]:9464"
  // for IPv6); port 0 picks a free one. The collectables are held weakly:
  // their owner keeps them alive while the server runs.
  static absl::StatusOr<std::unique_ptr<AdminHttpServer>> Start(
      const std::string& address,
      const std::vector<std::shared_ptr<prometheus::Collectable>>& metrics);
  ~AdminHttpServer();

  int port() const { return port_; }

 private:
  AdminHttpServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_ADMIN_HTTP_SERVER_H_
