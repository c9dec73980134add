// ServerConfig: everything the server is told at startup. main() fills it
// from flags (server_flags.cc), tests fill it directly.
#ifndef EXPOSURE_FILTER_SRC_SERVER_CONFIG_SERVER_CONFIG_H_
#define EXPOSURE_FILTER_SRC_SERVER_CONFIG_SERVER_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "src/cluster/replica_ownership.h"
#include "src/filter/filter_policy.h"
#include "src/ingest/kafka_ingest_options.h"
#include "src/persist/store_durability.h"
#include "src/server/config/admission_limits.h"
#include "src/server/config/authorization_options.h"
#include "src/server/config/session_options.h"
#include "src/server/config/transport_tuning.h"
#include "src/store/trace_log.h"

namespace exposure_filter {

struct RequestLimits {
  size_t max_id_bytes = 256;                   // user ids and item keys
  size_t max_items_per_request = 100000;       // RecordExposure, all users
  size_t max_exposures_per_request = 10000;    // RecordExposure users
  size_t max_candidates_per_request = 100000;  // FilterRecalled ids + keys
  absl::Duration max_future_skew = absl::Minutes(5);
};

// gRPC HTTP/2 keepalive and connection-lifetime settings; see
// docs/operations.md. Durations of zero or infinity turn a setting off.
struct KeepaliveOptions {
  // The server pings a connection idle this long, and drops it when the
  // ping is not answered within `timeout` (dead peers, silent NAT drops).
  absl::Duration time = absl::Minutes(1);
  absl::Duration timeout = absl::Seconds(20);
  // Enforcement: a client pinging more often than this (with no data
  // between) earns a strike; after max_ping_strikes the server sends GOAWAY
  // ENHANCE_YOUR_CALM ("too_many_pings") and closes the connection.
  absl::Duration min_client_ping_interval = absl::Seconds(10);
  int max_ping_strikes = 2;
  // Whether clients may keepalive-ping connections with no call in flight
  // (recall servers keep idle channels warm), and the server pings them too.
  bool permit_without_calls = true;
  // Close connections idle this long / older than this (with
  // max_connection_age_grace for calls in flight), e.g. so clients
  // re-resolve and spread over new replicas.
  absl::Duration max_connection_idle = absl::InfiniteDuration();
  absl::Duration max_connection_age = absl::InfiniteDuration();
  absl::Duration max_connection_age_grace = absl::InfiniteDuration();
};

// Transport security of the serving port (TLS/mTLS). Empty
// cert_file means plaintext, the quick-start default on localhost.
struct TlsOptions {
  std::string cert_file;       // PEM server certificate chain
  std::string key_file;        // PEM private key of the first certificate
  std::string client_ca_file;  // PEM CA bundle; non-empty turns on mTLS
  // With client_ca_file: refuse clients without a certificate (true), or
  // only verify the ones that present one (false).
  bool require_client_cert = true;

  bool enabled() const { return !cert_file.empty(); }
};

// "plaintext", "tls" or "mtls" (client certificate required) or
// "tls+optional-client-cert", for the startup log.
inline const char* TlsModeName(const TlsOptions& tls) {
  if (!tls.enabled()) return "plaintext";
  if (tls.client_ca_file.empty()) return "tls";
  return tls.require_client_cert ? "mtls" : "tls+optional-client-cert";
}

// Overload protection (docs/reliability.md "Overload"). Zero turns
// a limit off.
struct OverloadOptions {
  // gRPC ResourceQuota (ResourceQuota::Resize): memory gRPC may use for
  // transport buffers, i.e. requests being received and responses being
  // sent. Under pressure gRPC shrinks flow-control windows, then cancels
  // streams (the client sees RESOURCE_EXHAUSTED or UNAVAILABLE).
  int64_t grpc_memory_quota_bytes = int64_t{512} << 20;
  // HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: calls one connection may have
  // open at once; more wait in the client.
  int max_concurrent_streams = 100;
  // AdmissionGate (admission_gate.h): data-plane RPCs in flight across the
  // server, and the bytes of their request messages.
  AdmissionLimits admission = {
      /*max_inflight_rpcs=*/256,
      /*max_inflight_request_bytes=*/int64_t{256} << 20};
};

struct ServerConfig {
  std::string listen_address = "localhost:50051";
  int shards = 64;
  FilterPolicyOptions default_policy;
  std::vector<std::pair<std::string, FilterPolicyOptions>> surface_overrides;
  size_t max_surfaces = 64;
  RequestLimits limits;
  int max_receive_message_bytes = 64 << 20;
  absl::Duration sweep_interval = absl::Minutes(1);
  absl::Duration shutdown_grace = absl::Seconds(10);
  // TLS/mTLS: transport security of the serving port.
  TlsOptions tls;
  // Per-RPC authorization by client certificate identity (needs
  // mutual TLS) and the audit of admin RPCs.
  AuthorizationOptions authorization;
  // Performance: HTTP/2 frame and TCP read-chunk sizes.
  TransportTuning transport;
  // Reliability: overload protection.
  OverloadOptions overload;
  // Traced users: traced from startup, and the bounds.
  std::vector<std::string> trace_users;
  TraceLimits trace_limits;

  // --- Operations: admin port, memory ceiling, lifecycle ------------------
  // Admin HTTP (/metrics) address; "" = none. The flag defaults to
  // 127.0.0.1:9464; in-process tests leave it off.
  std::string admin_listen_address;
  // Ceiling on the bytes user filters hold (0 = none): the least recently
  // active users are evicted to stay under it.
  uint64_t memory_limit_bytes = 0;
  // The drain: on SIGTERM/SIGINT, how long to keep answering every call
  // while reporting NOT_SERVING, so readiness probes and clients move away
  // before the port closes (a call reaching gRPC after that is cancelled
  // by gRPC itself). 0 = close at once.
  absl::Duration shutdown_delay = absl::ZeroDuration();
  KeepaliveOptions keepalive;
  // --- Durability: write-ahead log, snapshots, recovery. ---
  // durability.data_dir empty (the default here, for in-process tests) keeps
  // everything in memory only; the --data_dir flag defaults to ./data.
  DurabilityOptions durability;
  // --- Scale-out: Kafka partitions, replicas, this one's ordinal.
  ClusterOptions cluster;
  // --- Kafka ingest: the optional consumer; off when
  // kafka.brokers is empty (docs/kafka.md).
  KafkaIngestOptions kafka;
  // How replicas are reached, for "owned by" errors: "{ordinal}" is
  // replaced, e.g. "exposure-filter-{ordinal}.exposure-filter:50051";
  // "" = errors name the ordinal only.
  std::string replica_address_template;
  // High availability: with --replication_factor >= 2 a copy
  // lagging the Kafka log by more than this (docs/scale-out.md defines the
  // lag), or still replaying it after its start, reports NOT_SERVING and
  // answers reads UNAVAILABLE so clients use another owner. Zero turns the
  // gate off (read-your-writes min_offsets still hold). Ignored otherwise.
  absl::Duration max_serving_lag = absl::Seconds(1);
  // The session stream's bounds (docs/session-stream.md).
  SessionOptions session;

  // Human-readable one-line summary for the startup log.
  std::string Summary() const;
};

// OK when `lag` is a finite duration >= 0; else InvalidArgument naming
// --max_serving_lag.
absl::Status ValidateMaxServingLag(absl::Duration lag);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_CONFIG_SERVER_CONFIG_H_
