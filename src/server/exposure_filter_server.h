// ExposureFilterServer: owns the surfaces, the store and the gRPC server
// (exposure.v1 + grpc.health.v1 + reflection) and the background sweeper
// that drops aged-out slices.
#ifndef EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVER_H_
#define EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVER_H_

#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "src/persist/store_durability.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/server/exposure_filter_service.h"
#include "src/server/server_config.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {

class ExposureFilterServer {
 public:
  // Builds and starts serving. `clock` must outlive the server. With a
  // data_dir, takes its lock, starts gRPC with health NOT_SERVING (RPCs
  // answer UNAVAILABLE), recovers the store, and only then reports SERVING
  // and returns; a failed recovery stops the server and returns the error.
  static absl::StatusOr<std::unique_ptr<ExposureFilterServer>> Start(
      const ServerConfig& config, const Clock* clock);
  ~ExposureFilterServer();

  // The bound port (useful with "localhost:0").
  int port() const { return port_; }

  // Health -> NOT_SERVING, stop accepting, let in-flight RPCs finish for up to
  // config.shutdown_grace, then cancel the rest; then (durable servers)
  // write the final snapshot and close the log. Idempotent; thread-safe.
  void Shutdown();
  // Blocks until the server has shut down.
  void Wait();

  ShardedFilterStore& store() { return *store_; }
  // Null when the server is not durable (no data_dir).
  StoreDurability* durability() { return durability_.get(); }
  // What recovery found at startup (zeros when not durable).
  const RecoveryReport& recovery() const { return recovery_; }

 private:
  explicit ExposureFilterServer(const ServerConfig& config);
  void SweepLoop();

  const ServerConfig config_;
  std::unique_ptr<SurfaceRegistry> surfaces_;
  std::unique_ptr<ShardedFilterStore> store_;
  // Declared after the store: destroyed (log closed) before it.
  std::unique_ptr<StoreDurability> durability_;
  RecoveryReport recovery_;
  std::unique_ptr<ExposureFilterHandlers> handlers_;
  std::unique_ptr<ExposureFilterService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Notification stopping_;
  absl::once_flag shutdown_once_;
  std::thread sweeper_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVER_H_
