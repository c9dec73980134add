// GrpcServerMetrics: per-method RPC counts by status code and handling-time
// histograms with the names and labels of the gRPC ecosystem's Prometheus
// conventions (go-grpc-prometheus / grpc-ecosystem):
//   grpc_server_started_total{grpc_service,grpc_method,grpc_type}
//   grpc_server_handled_total{grpc_service,grpc_method,grpc_type,grpc_code}
//   grpc_server_handling_seconds{grpc_service,grpc_method,grpc_type}
//   (histogram)
//   grpc_server_in_flight_rpcs (gauge): calls whose server-side
//   call object exists, from creation until gRPC releases it, whether the
//   call completed, was cancelled, timed out or lost its client. A count
//   that does not return to its baseline once clients are gone is a leak.
//
// Measured by a server interceptor (Factory below), so every service on the
// server is covered (ours, health, reflection) and no handler does anything.
// The methods are learnt from the services' descriptors at startup, and every
// (method, code) series exists from the first scrape; a call to a method the
// server does not know is counted under grpc_service="unknown", never under
// the name the client sent (that would let clients mint label values).
#ifndef EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_GRPC_SERVER_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_GRPC_SERVER_METRICS_H_

#include <grpcpp/support/server_interceptor.h>
#include <prometheus/collectable.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "src/server/observability/striped_metrics.h"

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
  // The call object of a Started() RPC is gone (interceptor destroyed).
  void Released() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }

  std::vector<prometheus::MetricFamily> Collect() const override;

  // Counts handled RPCs by code over all methods of `service` ("" = all).
  uint64_t HandledCount(absl::string_view service, int code) const;
  // Counts started RPCs over all methods of `service` ("" = all).
  uint64_t StartedCount(absl::string_view service) const;
  // RPCs started and not yet released, all services.
  int64_t InFlight() const {
    return in_flight_.load(std::memory_order_relaxed);
  }

  // An interceptor factory feeding these metrics, for
  // ServerBuilder::experimental().SetInterceptorCreators.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewInterceptorFactory();

 private:
  std::vector<std::unique_ptr<Method>> methods_;  // [0] = unknown
  absl::flat_hash_map<std::string, Method*> by_path_;
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_GRPC_SERVER_METRICS_H_
