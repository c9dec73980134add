#include "src/server/exposure_filter_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"
#include "src/server/tls_credentials.h"

namespace exposure_filter {
namespace {

constexpr char kServiceName[] = "exposure.v1.ExposureFilter";

}  // namespace

ExposureFilterServer::ExposureFilterServer(const ServerConfig& config)
    : config_(config) {}

absl::StatusOr<std::unique_ptr<ExposureFilterServer>>
ExposureFilterServer::Start(const ServerConfig& config, const Clock* clock) {
  if (absl::Status st = config.transport.Validate(); !st.ok()) return st;
  if (config.shards < 1 || config.shards > 65536 ||
      (config.shards & (config.shards - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shards must be a power of two in [1, 65536], got ", config.shards));
  }
  // Bad TLS files are a startup error naming the flag, before any state.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFor(config.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<ExposureFilterServer> s(new ExposureFilterServer(config));
  absl::StatusOr<std::unique_ptr<SurfaceRegistry>> surfaces =
      SurfaceRegistry::Create(config.default_policy, config.surface_overrides,
                              config.max_surfaces);
  if (!surfaces.ok()) return surfaces.status();
  s->surfaces_ = *std::move(surfaces);
  s->store_ = std::make_unique<ShardedFilterStore>(config.shards, clock,
                                                   s->surfaces_.get());
  s->handlers_ = std::make_unique<ExposureFilterHandlers>(
      s->surfaces_.get(), s->store_.get(), config.limits);
  const bool durable = !config.durability.data_dir.empty();
  if (durable) {
    // Lock the data_dir before listening: a second server on the same
    // directory must fail here, not after it has taken traffic.
    absl::StatusOr<std::unique_ptr<StoreDurability>> durability =
        StoreDurability::Open(config.durability, s->surfaces_.get(),
                              s->store_.get());
    if (!durability.ok()) return durability.status();
    s->durability_ = *std::move(durability);
    s->handlers_->SetAvailable(false);
  }
  s->service_ = std::make_unique<ExposureFilterService>(s->handlers_.get());

  // Link grpc.health.v1 into the generated descriptor pool so reflection can
  // describe the built-in health service (which itself uses upb, not this).
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen_address, *credentials, &s->port_);
  builder.SetMaxReceiveMessageSize(config.max_receive_message_bytes);
  // gRPC sets SO_REUSEPORT by default, which would let a second instance bind
  // the same port and silently split traffic between two independent sets of
  // in-memory filters. A taken port must be a startup error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  ApplyTransportTuning(config.transport, &builder);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen_address,
                     " (address in use or invalid?)"));
  }
  grpc::HealthCheckServiceInterface* health = s->server_->GetHealthCheckService();
  if (durable) {
    // Serve health (NOT_SERVING) and UNAVAILABLE while the store loads, so
    // probes and clients see "starting" instead of connection refused.
    health->SetServingStatus(kServiceName, false);
    health->SetServingStatus(false);
    spdlog::info(
        "recovering from {} (fsync={}, fsync_interval={}, "
        "snapshot_interval={}, snapshot_wal_bytes={}, strict={})",
        config.durability.data_dir,
        std::string(FsyncPolicyName(config.durability.fsync)),
        absl::FormatDuration(config.durability.fsync_interval),
        absl::FormatDuration(config.durability.snapshot_interval),
        config.durability.snapshot_wal_bytes,
        config.durability.strict_recovery);
    absl::StatusOr<RecoveryReport> report = s->durability_->Recover();
    if (!report.ok()) {
      s->server_->Shutdown();
      s->durability_.reset();
      s->server_.reset();
      return absl::Status(
          report.status().code(),
          absl::StrCat("recovery from ", config.durability.data_dir,
                       " failed: ", report.status().message()));
    }
    s->recovery_ = *std::move(report);
    s->handlers_->AttachDurability(s->durability_.get());
    s->handlers_->SetAvailable(true);
  }
  health->SetServingStatus(kServiceName, true);
  health->SetServingStatus(true);
  s->sweeper_ = std::thread([p = s.get()] { p->SweepLoop(); });
  return s;
}

ExposureFilterServer::~ExposureFilterServer() {
  Shutdown();
  if (sweeper_.joinable()) sweeper_.join();
}

void ExposureFilterServer::SweepLoop() {
  while (!stopping_.WaitForNotificationWithTimeout(config_.sweep_interval)) {
    const uint64_t removed = store_->DropExpired();
    if (removed > 0) {
      spdlog::debug("sweep removed {} users whose history aged out", removed);
    }
  }
}

void ExposureFilterServer::Shutdown() {
  // A server whose Start() failed (bad surface policy, port in use) is
  // destroyed without a gRPC server: nothing to shut down.
  if (server_ == nullptr) return;
  absl::call_once(shutdown_once_, [this] {
    spdlog::info("shutting down: NOT_SERVING, draining for up to {}",
                 absl::FormatDuration(config_.shutdown_grace));
    grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
    health->SetServingStatus(kServiceName, false);
    health->SetServingStatus(false);
    stopping_.Notify();
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(config_.shutdown_grace));
    // No RPC runs any more: the final snapshot holds every acknowledged
    // write, and the next start replays an empty log tail.
    if (durability_ != nullptr) {
      if (absl::Status st = durability_->Close(/*final_snapshot=*/true);
          !st.ok()) {
        spdlog::error(
            "final snapshot failed (the log still holds every "
            "write): {}",
            st.ToString());
      }
    }
    spdlog::info("shutdown complete");
  });
}

void ExposureFilterServer::Wait() { server_->Wait(); }

}  // namespace exposure_filter
