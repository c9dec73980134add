// ExposureFilterServer: owns the surfaces, the store and the gRPC server
// (exposure.v1 + grpc.health.v1 + reflection), the admin HTTP port
// (Prometheus /metrics) and the background housekeeper that drops aged-out
// slices and reports memory-ceiling evictions.
#ifndef EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVER_H_
#define EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "src/cluster/replica_ownership.h"
#include "src/ingest/exposure_log_producer.h"
#include "src/ingest/kafka_ingest.h"
#include "src/persist/store_durability.h"
#include "src/server/admission_gate.h"
#include "src/server/config/server_config.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/server/exposure_filter_metrics.h"
#include "src/server/exposure_filter_service.h"
#include "src/server/kafka_exposure_sink.h"
#include "src/server/observability/admin_http_server.h"
#include "src/server/observability/durability_metrics.h"
#include "src/server/observability/grpc_server_metrics.h"
#include "src/server/observability/kafka_ingest_metrics.h"
#include "src/server/observability/process_metrics.h"
#include "src/server/security/admin_audit.h"
#include "src/server/security/authorization_metrics.h"
#include "src/server/security/rpc_authorizer.h"
#include "src/server/security/tls_handshake_failures.h"
#include "src/server/serving_health.h"
#include "src/server/serving_readiness.h"
#include "src/server/session_hub.h"
#include "src/server/user_ownership_gate.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"
#include "src/store/trace_log.h"

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
  // The admin HTTP port, 0 when there is none.
  int admin_port() const { return admin_ ? admin_->port() : 0; }

  // Three phases, each logged once. Drain: health -> NOT_SERVING while
  // every call is still answered, for config.shutdown_delay (readiness
  // probes and health-checking clients move away; calls racing the flip
  // succeed). Stop: end the session streams UNAVAILABLE, stop accepting,
  // let in-flight RPCs finish for up to config.shutdown_grace, then cancel
  // the rest. Persist: close the Kafka producer and consumer, and (durable
  // servers) write the final snapshot and close the log.
  // Idempotent; thread-safe; returns when all of that is done.
  void Shutdown();
  // Blocks until the server has shut down.
  void Wait();

  ShardedFilterStore& store() { return *store_; }
  const GrpcServerMetrics& grpc_metrics() const { return *grpc_metrics_; }
  // The Prometheus collectables /metrics serves.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const {
    return {grpc_metrics_,          metrics_,   process_metrics_,
            durability_metrics_,    admission_, kafka_metrics_,
            authorization_metrics_, readiness_, session_hub_,
            handshake_failures_};
  }
  // Traced users' exact exposures; Export/Import for durability.
  TraceLog& trace_log() { return *trace_log_; }
  // Null when the server is not durable (no data_dir).
  StoreDurability* durability() { return durability_.get(); }
  // What recovery found at startup (zeros when not durable).
  const RecoveryReport& recovery() const { return recovery_; }
  // Overload protection: the admission limits' state.
  const AdmissionGate& admission() const { return *admission_; }
  // The Kafka consumer; null when --kafka_brokers is empty.
  KafkaIngest* kafka_ingest() { return kafka_ingest_.get(); }
  // The replicated write path's producer; null unless R >= 2.
  ExposureLogProducer* log_producer() { return log_producer_.get(); }
  // Lag-gated reads; started only with R >= 2.
  const ServingReadiness& readiness() const { return *readiness_; }
  // The session stream's subscriptions and counters.
  SessionHub& session_hub() { return *session_hub_; }
  // A channel to this server inside the process, no socket: the session
  // fuzzer's client. Its transport hands a message over only when the
  // other side reads it, so a client that stops reading stalls the
  // server's write at once, with no HTTP/2 window in between.
  std::shared_ptr<grpc::Channel> InProcessChannel() {
    return server_->InProcessChannel(grpc::ChannelArguments());
  }

 private:
  explicit ExposureFilterServer(const ServerConfig& config);
  // Every second: log new memory-ceiling evictions (rate-limited); every
  // sweep_interval: drop aged-out slices and report the sweep.
  void HousekeepingLoop();
  void Sweep();

  const ServerConfig config_;
  std::unique_ptr<SurfaceRegistry> surfaces_;
  std::unique_ptr<ShardedFilterStore> store_;
  std::unique_ptr<TraceLog> trace_log_;
  // Declared after the store: destroyed (log closed) before it.
  std::unique_ptr<StoreDurability> durability_;
  RecoveryReport recovery_;
  // Scale-out; declared before the handlers that point at it.
  std::unique_ptr<UserOwnershipGate> ownership_gate_;
  std::unique_ptr<ExposureFilterHandlers> handlers_;
  // Overload protection; shared with the /metrics collectables.
  std::shared_ptr<AdmissionGate> admission_;
  // Session streams: notified by the store of every applied write; shared
  // with the /metrics collectables. Outlives server_ (its reactors point
  // at it) and is detached from the store before the store goes.
  std::shared_ptr<SessionHub> session_hub_;
  std::unique_ptr<ExposureFilterService> service_;
  // Metrics outlive server_ (its interceptors point at grpc_metrics_).
  std::shared_ptr<GrpcServerMetrics> grpc_metrics_;
  std::shared_ptr<ExposureFilterMetrics> metrics_;
  std::shared_ptr<ProcessMetrics> process_metrics_;
  // Disk faults: exports nothing when not durable.
  std::shared_ptr<DurabilityMetrics> durability_metrics_;
  // Kafka ingest: the consumer stops before the final snapshot so
  // the snapshot holds its last durable offsets.
  std::shared_ptr<KafkaIngestMetrics> kafka_metrics_;
  std::unique_ptr<ReplicaOwnership> ownership_;
  std::unique_ptr<KafkaExposureSink> kafka_sink_;
  std::unique_ptr<KafkaIngest> kafka_ingest_;
  // Health once started: the lag decision and the producer's writability
  // (serving_health.h). Stopped by Shutdown before the producer closes;
  // declared before it, so it outlives the producer's callbacks.
  std::unique_ptr<ServingHealth> serving_health_;
  // Replicated writes: with R >= 2 write RPCs are produced
  // to the topic; closed after the gRPC server drained (its last calls get
  // their delivery reports), before the consumer stops.
  std::unique_ptr<ExposureLogProducer> log_producer_;
  // Lag-gated reads: attached to the handlers before they
  // serve, started with the consumer, stopped first at shutdown (it flips
  // health). Shared with the /metrics collectables.
  std::shared_ptr<ServingReadiness> readiness_ =
      std::make_shared<ServingReadiness>();
  std::unique_ptr<AdminHttpServer> admin_;
  // Authorization and audit; outlive server_, which points at
  // them (auth metadata processor, interceptor). authorizer_ is null when
  // authorization is off.
  std::unique_ptr<AdminAudit> audit_;
  std::shared_ptr<AuthorizationMetrics> authorization_metrics_;
  std::shared_ptr<RpcAuthorizer> authorizer_;
  // Refused TLS handshakes, from gRPC's log (tls_handshake_failures.h);
  // all zero on a plaintext port.
  std::shared_ptr<TlsHandshakeFailures> handshake_failures_ =
      std::make_shared<TlsHandshakeFailures>();
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Notification stopping_;
  absl::once_flag shutdown_once_;
  std::thread sweeper_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_SERVER_H_
