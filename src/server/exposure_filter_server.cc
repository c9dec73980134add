#include "src/server/exposure_filter_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <climits>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"
#include "src/base/log_rate_limiter.h"
#include "src/server/security/admin_audit_interceptor.h"
#include "src/server/security/tls_credentials.h"
#include "src/server/unowned_users.h"

namespace exposure_filter {
namespace {

constexpr char kServiceName[] = "exposure.v1.ExposureFilter";

// A duration as a gRPC millisecond channel argument; zero or infinite means
// "never" (INT_MAX is gRPC's infinity for these arguments).
int ChannelArgMs(absl::Duration d) {
  if (d <= absl::ZeroDuration() || d >= absl::Milliseconds(INT_MAX)) {
    return INT_MAX;
  }
  return static_cast<int>(absl::ToInt64Milliseconds(d));
}

void ApplyKeepalive(const KeepaliveOptions& k, grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ChannelArgMs(k.time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             ChannelArgMs(k.timeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                             k.permit_without_calls ? 1 : 0);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(k.min_client_ping_interval), INT_MAX)));
  // Our own keepalive pings must continue on idle connections (the default
  // stops after two pings without data), or dead idle peers go unnoticed.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES,
                             k.max_ping_strikes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             ChannelArgMs(k.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             ChannelArgMs(k.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             ChannelArgMs(k.max_connection_age_grace));
}

}  // namespace

ExposureFilterServer::ExposureFilterServer(const ServerConfig& config)
    : config_(config) {}

absl::StatusOr<std::unique_ptr<ExposureFilterServer>>
ExposureFilterServer::Start(const ServerConfig& config, const Clock* clock) {
  if (absl::Status st = config.transport.Validate(); !st.ok()) return st;
  if (absl::Status st = ValidateMaxServingLag(config.max_serving_lag);
      !st.ok()) {
    return st;
  }
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
  // Refused handshakes are seen only in gRPC's own log: route it before the
  // port listens.
  if (config.tls.enabled()) RouteGrpcLogs(s->handshake_failures_.get());
  // Authorization and audit: a bad policy, or a policy without
  // mutual TLS, is a startup error before any state.
  s->audit_ =
      std::make_unique<AdminAudit>(config.authorization.audit_hash_user_ids);
  s->authorization_metrics_ =
      std::make_shared<AuthorizationMetrics>(config.authorization.enabled());
  if (config.authorization.enabled()) {
    absl::StatusOr<std::shared_ptr<RpcAuthorizer>> authorizer =
        RpcAuthorizer::Create(config.authorization, config.tls,
                              s->authorization_metrics_.get(), s->audit_.get());
    if (!authorizer.ok()) return authorizer.status();
    s->authorizer_ = *std::move(authorizer);
    (*credentials)->SetAuthMetadataProcessor(s->authorizer_);
  }
  LogAuthorizationMode(config.authorization, config.tls, s->authorizer_.get());
  absl::StatusOr<std::unique_ptr<SurfaceRegistry>> surfaces =
      SurfaceRegistry::Create(config.default_policy, config.surface_overrides,
                              config.max_surfaces);
  if (!surfaces.ok()) return surfaces.status();
  s->surfaces_ = *std::move(surfaces);
  s->store_ = std::make_unique<ShardedFilterStore>(config.shards, clock,
                                                   s->surfaces_.get());
  s->store_->SetMemoryLimit(config.memory_limit_bytes);
  s->trace_log_ = std::make_unique<TraceLog>(config.trace_limits);
  s->handlers_ = std::make_unique<ExposureFilterHandlers>(
      s->surfaces_.get(), s->store_.get(), config.limits, s->trace_log_.get());
  // Scale-out: invalid P/N/ordinal/R is a startup error, not a
  // replica that silently serves the wrong users; R >= 2 needs the Kafka log
  // that keeps the copies equal.
  if (absl::Status st =
          config.cluster.ValidateWithIngest(config.kafka.enabled());
      !st.ok()) {
    return st;
  }
  s->ownership_gate_ = std::make_unique<UserOwnershipGate>(
      config.cluster, config.replica_address_template);
  s->handlers_->AttachOwnership(s->ownership_gate_.get());
  // Replicated: reads are gated on this copy's lag from the
  // start (refused until the consumer has caught up), and take min_offsets.
  const bool replicated =
      config.kafka.enabled() && config.cluster.replication_factor > 1;
  if (replicated) s->handlers_->AttachReadiness(s->readiness_.get());
  const bool durable = !config.durability.data_dir.empty();
  if (durable) {
    // Lock the data_dir before listening: a second server on the same
    // directory must fail here, not after it has taken traffic.
    absl::StatusOr<std::unique_ptr<StoreDurability>> durability =
        StoreDurability::Open(config.durability, s->surfaces_.get(),
                              s->store_.get());
    if (!durability.ok()) return durability.status();
    s->durability_ = *std::move(durability);
    s->durability_->AttachTraceLog(s->trace_log_.get());
    s->handlers_->SetAvailable(false);
  }
  s->admission_ = std::make_shared<AdmissionGate>(config.overload.admission);
  if (absl::Status st = config.session.Validate(); !st.ok()) return st;
  s->session_hub_ = std::make_shared<SessionHub>(config.session);
  s->store_->SetApplyObserver(s->session_hub_.get());
  s->service_ = std::make_unique<ExposureFilterService>(
      s->handlers_.get(), s->session_hub_.get(), s->admission_.get());
  s->grpc_metrics_ = std::make_shared<GrpcServerMetrics>(
      std::vector<std::string>{kServiceName, "grpc.health.v1.Health",
                               "grpc.reflection.v1alpha.ServerReflection"});
  s->metrics_ = std::make_shared<ExposureFilterMetrics>(
      s->surfaces_.get(), s->store_.get(), s->handlers_.get());
  s->process_metrics_ = std::make_shared<ProcessMetrics>();
  s->durability_metrics_ = std::make_shared<DurabilityMetrics>();
  s->kafka_metrics_ = std::make_shared<KafkaIngestMetrics>();
  if (!config.admin_listen_address.empty()) {
    absl::StatusOr<std::unique_ptr<AdminHttpServer>> admin =
        AdminHttpServer::Start(config.admin_listen_address, s->collectables());
    if (!admin.ok()) return admin.status();
    s->admin_ = *std::move(admin);
  }

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
  ApplyKeepalive(config.keepalive, builder);
  // Overload protection: bound what gRPC buffers before handlers
  // run; the AdmissionGate bounds what they hold after.
  if (config.overload.grpc_memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("exposure-filter-server");
    quota.Resize(static_cast<size_t>(config.overload.grpc_memory_quota_bytes));
    builder.SetResourceQuota(quota);
  }
  if (config.overload.max_concurrent_streams > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                               config.overload.max_concurrent_streams);
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(s->grpc_metrics_->NewInterceptorFactory());
  interceptors.push_back(NewAdminAuditInterceptorFactory(
      s->audit_.get(), s->authorizer_ ? &s->authorizer_->policy() : nullptr));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen_address,
                     " (address in use or invalid?)"));
  }
  grpc::HealthCheckServiceInterface* health =
      s->server_->GetHealthCheckService();
  s->serving_health_ = std::make_unique<ServingHealth>(health, kServiceName);
  if (replicated && !durable) {
    // NOT_SERVING until the consumer has caught up (ServingReadiness).
    health->SetServingStatus(kServiceName, false);
    health->SetServingStatus(false);
  }
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
    // After a change of --replicas (or --partitions) the snapshot holds
    // other replicas' users: drop them (journaled) rather than serve stale
    // filters (unowned_users.h, docs/scale-out.md).
    const uint64_t dropped = DropUnownedUsers(
        s->ownership_gate_->ownership(), s->store_.get(), s->trace_log_.get());
    if (dropped > 0) {
      s->handlers_->SetUnownedUsersDropped(dropped);
      const ClusterOptions& cluster = config.cluster;
      spdlog::warn(
          "event=unowned_users_dropped users={} partitions={} replicas={} "
          "replica_ordinal={} msg=\"recovered filters of users other "
          "replicas own (resharded?) were dropped\"",
          dropped, cluster.partitions, cluster.replicas,
          cluster.replica_ordinal);
      if (absl::Status st = s->durability_->Commit(); !st.ok()) {
        // Not fatal: they are gone from memory; a crash before the next
        // snapshot would recover and drop them again.
        spdlog::warn("event=unowned_users_drop_not_logged status=\"{}\"",
                     st.ToString());
      }
    }
    s->durability_metrics_->Attach(s->durability_.get(), s->recovery_);
  }
  // After recovery, which replaces the trace with the one saved: users
  // restored keep their traced_since, new ones from the flag are logged.
  if (!config.trace_users.empty()) {
    absl::StatusOr<size_t> traced =
        s->trace_log_->Add(config.trace_users, clock->NowMs());
    if (!traced.ok()) {
      // Restored users count against --trace_max_users too; do not refuse
      // to start over debugging data.
      if (!durable) return traced.status();
      spdlog::warn("--trace_users not applied: {}",
                   std::string(traced.status().message()));
    }
  }
  if (durable) s->handlers_->SetAvailable(true);
  if (config.kafka.enabled()) {
    // Kafka ingest: after recovery (it seeks to the recovered
    // offsets), before SERVING (a topic with the wrong partition count must
    // fail the start, not a replica that looks healthy).
    s->ownership_ = std::make_unique<ReplicaOwnership>(config.cluster);
    s->kafka_sink_ = std::make_unique<KafkaExposureSink>(
        s->handlers_.get(), s->surfaces_.get(), s->store_.get(), config.limits);
    absl::StatusOr<std::unique_ptr<KafkaIngest>> ingest =
        KafkaIngest::Start(config.kafka, s->ownership_.get(),
                           s->kafka_sink_.get(), s->durability_.get());
    absl::Status started = ingest.status();
    if (started.ok() && config.cluster.replication_factor > 1) {
      // Replicated: write RPCs are produced to the topic
      // the consumer above applies; until attached they answer
      // UNAVAILABLE, and health says SERVING only after this.
      ExposureLogProducerOptions po;
      po.brokers = config.kafka.brokers;
      po.topic = config.kafka.topic;
      po.partitions = config.cluster.partitions;
      po.produce_timeout = config.kafka.produce_timeout;
      po.librdkafka_config = config.kafka.librdkafka_config;
      // A fatal producer error turns health NOT_SERVING until the producer
      // is rebuilt: this replica cannot take writes meanwhile.
      po.on_writable = [h = s->serving_health_.get()](bool writable) {
        h->SetWritesReady(writable);
      };
      absl::StatusOr<std::unique_ptr<ExposureLogProducer>> producer =
          ExposureLogProducer::Start(po);
      if (producer.ok()) {
        s->log_producer_ = *std::move(producer);
        s->handlers_->AttachExposureLog(
            s->log_producer_.get(),
            KafkaMessageEncoder(config.kafka.format, config.kafka.surface));
      } else {
        started = producer.status();
        (*ingest)->Stop();
      }
    }
    if (!started.ok()) {
      s->server_->Shutdown();
      if (s->durability_ != nullptr) {
        s->durability_->Close(/*final_snapshot=*/false).IgnoreError();
      }
      s->server_.reset();
      return started;
    }
    s->kafka_ingest_ = *std::move(ingest);
    s->kafka_metrics_->Attach(s->kafka_ingest_.get());
    s->kafka_metrics_->AttachProducer(s->log_producer_.get());
  }
  if (replicated) {
    // Readiness follows the copy's lag from now on: NOT_SERVING until the
    // consumer has caught up with the log's end seen at start.
    s->readiness_->Start(s->kafka_ingest_.get(), config.max_serving_lag,
                         [h = s->serving_health_.get()](bool serving) {
                           h->SetReadsReady(serving);
                         });
  } else {
    s->serving_health_->SetReadsReady(true);
  }
  s->sweeper_ = std::thread([p = s.get()] { p->HousekeepingLoop(); });
  return s;
}

ExposureFilterServer::~ExposureFilterServer() {
  Shutdown();
  StopRoutingHandshakeFailures(handshake_failures_.get());
  // Start() may have failed before Shutdown had anything to stop.
  if (!stopping_.HasBeenNotified()) stopping_.Notify();
  if (sweeper_.joinable()) sweeper_.join();
  admin_.reset();
  if (store_ != nullptr) store_->SetApplyObserver(nullptr);
}

void ExposureFilterServer::Sweep() {
  const absl::Time start = MonotonicTime();
  SweepReport report;
  store_->DropExpired(&report);
  const absl::Duration took = MonotonicTime() - start;
  const absl::Time end = absl::Now();  // the wall time of the sweep, a gauge
  metrics_->RecordSweep(report, end, took);
  if (report.users_removed > 0) {
    spdlog::debug("event=sweep users_aged_out={} took={}", report.users_removed,
                  absl::FormatDuration(took));
  }
  // Traced users' exact entries age out with the slices that held them.
  const uint64_t trace_entries =
      trace_log_->DropExpired(store_->clock().NowMs());
  if (trace_entries > 0) {
    spdlog::debug("event=sweep trace_entries_aged_out={}", trace_entries);
  }
}

void ExposureFilterServer::HousekeepingLoop() {
  // Evictions are reported from here, not from the request path: one line
  // per interval at most, with the totals.
  LogRateLimiter eviction_log(absl::Seconds(10));
  uint64_t evictions_logged = 0;
  const absl::Duration tick =
      std::min(absl::Seconds(1), config_.sweep_interval);
  // Scheduled on the monotonic clock: a wall-clock step back must not stall
  // aging (and the memory it frees) for as long as the step.
  absl::Time next_sweep = MonotonicTime() + config_.sweep_interval;
  while (!stopping_.WaitForNotificationWithTimeout(tick)) {
    const EvictionCounts ev = store_->evictions();
    uint64_t suppressed = 0;
    if (ev.users != evictions_logged && eviction_log.Allow(&suppressed)) {
      spdlog::warn(
          "event=memory_ceiling_eviction users_evicted={} "
          "users_evicted_total={} "
          "bytes_evicted_total={} store_bytes={} memory_limit_bytes={}",
          ev.users - evictions_logged, ev.users, ev.bytes,
          store_->total_bytes(), store_->memory_limit());
      evictions_logged = ev.users;
    }
    if (MonotonicTime() >= next_sweep) {
      Sweep();
      next_sweep = MonotonicTime() + config_.sweep_interval;
    }
    // Session leases and resync snapshots a copy could not serve yet.
    session_hub_->Tick(store_->clock().MonotonicMs());
  }
}

void ExposureFilterServer::Shutdown() {
  // A server whose Start() failed (bad surface policy, port in use) is
  // destroyed without a gRPC server: nothing to shut down.
  if (server_ == nullptr) return;
  absl::call_once(shutdown_once_, [this] {
    // Phase 1, drain: health says NOT_SERVING while every call is still
    // answered as before. Readiness probes, and clients that check health,
    // move away meanwhile; a call that raced the flip (sent before its
    // client saw it) is served. gRPC's Shutdown below cannot do this part:
    // a call reaching the server after it started is cancelled by gRPC
    // itself, before any handler runs, and its client sees CANCELLED.
    // Before NOT_SERVING: the lag monitor must not flip it back.
    readiness_->Stop();
    // Also keeps a producer rebuilt during the drain from announcing
    // SERVING.
    serving_health_->Stop();
    const uint64_t started_before_drain =
        grpc_metrics_->StartedCount(kServiceName);
    spdlog::info("event=shutdown_drain health=NOT_SERVING drain={}",
                 absl::FormatDuration(config_.shutdown_delay));
    if (config_.shutdown_delay > absl::ZeroDuration()) {
      absl::SleepFor(config_.shutdown_delay);
    }
    // Phase 2, stop: end the session streams, close the port, let the
    // calls in flight finish for up to shutdown_grace, cancel the rest.
    spdlog::info(
        "event=shutdown_stop rpcs_during_drain={} session_streams={} grace={}",
        grpc_metrics_->StartedCount(kServiceName) - started_before_drain,
        session_hub_->streams(), absl::FormatDuration(config_.shutdown_grace));
    stopping_.Notify();
    // Session streams never end on their own: end them now, UNAVAILABLE,
    // so their clients move to another owner instead of waiting for the
    // grace below to cancel them.
    session_hub_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(config_.shutdown_grace));
    // Phase 3, persist: no call runs any more.
    spdlog::info(
        "event=shutdown_persist kafka_producer={} kafka_consumer={} "
        "final_snapshot={}",
        log_producer_ != nullptr, kafka_ingest_ != nullptr,
        durability_ != nullptr);
    // Replicated writes: the drained calls have their answers; any still
    // waiting for Kafka get theirs (UNAVAILABLE if not acknowledged) here.
    if (log_producer_ != nullptr) {
      kafka_metrics_->AttachProducer(nullptr);
      log_producer_->Close();
    }
    // Kafka ingest: its last batch is recorded and its offsets
    // logged before the final snapshot, which then holds them.
    if (kafka_ingest_ != nullptr) {
      kafka_metrics_->Attach(nullptr);
      kafka_ingest_->Stop();
    }
    // No RPC runs any more: the final snapshot holds every acknowledged
    // write, and the next start replays an empty log tail.
    if (durability_ != nullptr) {
      if (absl::Status st = durability_->Close(/*final_snapshot=*/true);
          !st.ok()) {
        spdlog::error(
            "final snapshot failed (the log still holds every "
            "write): {}",
            st.ToString(absl::StatusToStringMode::kWithNoExtraData));
      }
    }
    uint64_t failed = 0;
    for (int code = 1; code < GrpcServerMetrics::kNumCodes; ++code) {
      failed += grpc_metrics_->HandledCount(kServiceName, code);
    }
    spdlog::info(
        "event=shutdown_complete msg=\"shutdown complete\" rpcs_started={} "
        "rpcs_ok={} rpcs_failed={}",
        grpc_metrics_->StartedCount(kServiceName),
        grpc_metrics_->HandledCount(kServiceName, 0), failed);
  });
}

void ExposureFilterServer::Wait() { server_->Wait(); }

}  // namespace exposure_filter
