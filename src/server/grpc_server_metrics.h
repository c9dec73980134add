// GrpcServerMetrics: per-method RPC counts by status code and handling-time
// histograms with the names and labels of the gRPC ecosystem's Prometheus
// conventions (go-grpc-prometheus / grpc-ecosystem):
//   grpc_server_started_total{grpc_service,grpc_method,grpc_type}
//   grpc_server_handled_total{grpc_service,grpc_method,grpc_type,grpc_code}
//   grpc_server_handling_seconds{grpc_service,grpc_method,grpc_type}
//   (histogram)
//
// Measured by a server interceptor (Factory below), so every service on the
// server is covered (ours, health, reflection) and no handler does anything.
// The methods are learnt from the services' descriptors at startup, and every
// (method, code) series exists from the first scrape; a call to a method the
// server does not know is counted under grpc_service="unknown", never under
// the name the client sent (that would let clients mint label values).
#ifndef EXPOSURE_FILTER_SRC_SERVER_GRPC_SERVER_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_GRPC_SERVER_METRICS_H_

#include <grpcpp/support/server_interceptor.h>
#include <prometheus/collectable.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "src/server/striped_metrics.h"

namespace exposure_filter {

class GrpcServerMetrics final : public prometheus::Collectable {
 public:
  // gRPC status codes 0 (OK) .. 16 (UNAUTHENTICATED).
  static constexpr int kNumCodes = 17;

  // `services`: fully-qualified names of the services whose methods get
  // their own series (each must be in the generated descriptor pool).
  explicit GrpcServerMetrics(const std::vector<std::string>& services);
  ~GrpcServerMetrics() override;

  // One RPC's accounting: Start() when it is created, Finish() once.
  class Method;
  Method* Lookup(absl::string_view path);
  void Started(Method* m);
  void Handled(Method* m, int code, uint64_t elapsed_ns);

  std::vector<prometheus::MetricFamily> Collect() const override;

  // Counts handled RPCs by code over all methods of `service` ("" = all).
  uint64_t HandledCount(absl::string_view service, int code) const;
  // Counts started RPCs over all methods of `service` ("" = all).
  uint64_t StartedCount(absl::string_view service) const;

  // An interceptor factory feeding these metrics, for
  // ServerBuilder::experimental().SetInterceptorCreators.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewInterceptorFactory();

 private:
  std::vector<std::unique_ptr<Method>> methods_;  // [0] = unknown
  absl::flat_hash_map<std::string, Method*> by_path_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_GRPC_SERVER_METRICS_H_
