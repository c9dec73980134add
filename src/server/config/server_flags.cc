#include "src/server/config/server_flags.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/store/surface_registry.h"

ABSL_FLAG(std::string, listen, "localhost:50051",
          "gRPC listen address (host:port); use 0.0.0.0:50051 in containers");
ABSL_FLAG(int, shards, 64,
          "store shards (power of two); each has its own lock");
ABSL_FLAG(double, fp_rate, 0.01,
          "target false-positive rate per lookup (default surface policy)");
ABSL_FLAG(absl::Duration, retention, absl::Hours(24 * 30),
          "how long an exposure is remembered, at least (e.g. 720h = 30 days)");
ABSL_FLAG(absl::Duration, slice_span, absl::Hours(24 * 5),
          "time-slice width: exposures are forgotten between retention and "
          "retention + slice_span after they happened; "
          "retention/slice_span + 1 must be <= 8");
ABSL_FLAG(std::string, surfaces, "",
          "per-surface policies, e.g. "
          "\"video:fp_rate=0.001:retention=7d:slice_span=1d\"; other "
          "surfaces use the defaults above");
ABSL_FLAG(int, max_surfaces, 64, "surfaces the server will create");
ABSL_FLAG(int, max_id_bytes, 256, "longest user id or item key accepted");
ABSL_FLAG(int, max_items_per_request, 100000,
          "items (ids + keys, all users) in one RecordExposure");
ABSL_FLAG(int, max_exposures_per_request, 10000,
          "Exposure entries (users) in one RecordExposure");
ABSL_FLAG(int, max_candidates_per_request, 100000,
          "candidates (ids + keys) in one FilterRecalled");
ABSL_FLAG(absl::Duration, max_future_skew, absl::Minutes(5),
          "event times up to this far ahead of the server clock are recorded "
          "at 'now'; later ones are rejected");
ABSL_FLAG(int, max_receive_message_bytes, 64 << 20,
          "largest request message accepted");
ABSL_FLAG(absl::Duration, sweep_interval, absl::Minutes(1),
          "how often aged-out slices are dropped from memory");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "on SIGTERM, after --shutdown_delay: how long in-flight RPCs may "
          "take to finish before they are cancelled");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn or error");
// Performance: transport tuning, see docs/performance.md.
ABSL_FLAG(int, http2_max_frame_size, 64 << 10,
          "grpc.http2.max_frame_size: largest HTTP/2 frame accepted "
          "(16384..16777215); a 5,000-candidate request is ~40 KB");
ABSL_FLAG(int, tcp_read_chunk_size, 64 << 10,
          "grpc.experimental.tcp_read_chunk_size: bytes asked per read()");
ABSL_FLAG(int, tcp_min_read_chunk_size, 16 << 10,
          "grpc.experimental.tcp_min_read_chunk_size");
ABSL_FLAG(int, tcp_max_read_chunk_size, 4 << 20,
          "grpc.experimental.tcp_max_read_chunk_size");
// --- Reliability: overload protection, docs/reliability.md ------------------
ABSL_FLAG(int64_t, grpc_memory_quota_bytes, int64_t{512} << 20,
          "gRPC resource quota: memory for transport buffers (requests being "
          "received, responses being sent); under pressure gRPC shrinks "
          "flow-control windows, then cancels streams (0 = gRPC's default, "
          "unbounded)");
ABSL_FLAG(int, max_concurrent_streams, 100,
          "HTTP/2 streams (calls) one client connection may have open at "
          "once; more wait in the client (0 = gRPC's default, unlimited)");
ABSL_FLAG(int64_t, max_inflight_rpcs, 256,
          "data-plane RPCs handled at once across the server (from admission "
          "until the response is sent); above it RPCs are answered "
          "RESOURCE_EXHAUSTED at once (0 = no limit)");
ABSL_FLAG(int64_t, max_inflight_request_bytes, int64_t{256} << 20,
          "bytes of the request messages of the RPCs in flight; above it "
          "RPCs are answered RESOURCE_EXHAUSTED at once (0 = no limit; a "
          "larger request alone is still admitted)");
// Traced users (for Explain and the CLI).
ABSL_FLAG(std::vector<std::string>, trace_users, {},
          "comma-separated user ids whose exposures are also kept exactly "
          "(item, time, surface) for Explain; more via AddTracedUsers");
ABSL_FLAG(int, trace_max_users, 1000, "most users traced at once");
ABSL_FLAG(int, trace_max_entries_per_user, 10000,
          "exact exposures kept per traced user (all surfaces); past it the "
          "oldest are dropped and counted");

// --- Operations: admin port, memory ceiling, lifecycle, keepalive
ABSL_FLAG(std::string, admin_listen, "127.0.0.1:9464",
          "admin HTTP address serving Prometheus /metrics (numeric host or "
          "localhost); empty disables it");
ABSL_FLAG(int64_t, memory_limit_bytes, 0,
          "ceiling on the memory user filters hold; above it the least "
          "recently active users are evicted (0 = no ceiling). Leave room "
          "for the process itself: see docs/operations.md");
ABSL_FLAG(absl::Duration, shutdown_delay, absl::ZeroDuration(),
          "the drain: on SIGTERM/SIGINT, keep answering every call this long "
          "with health NOT_SERVING before closing the port, so readiness "
          "probes and clients move away first (0 = close at once; at least "
          "the readiness probe's period x failureThreshold on Kubernetes)");
ABSL_FLAG(absl::Duration, keepalive_time, absl::Minutes(1),
          "ping a client connection after this much inactivity (0 = never)");
ABSL_FLAG(absl::Duration, keepalive_timeout, absl::Seconds(20),
          "close a connection whose keepalive ping is not answered in this "
          "time");
ABSL_FLAG(absl::Duration, keepalive_min_client_ping_interval, absl::Seconds(10),
          "clients pinging more often than this get strikes, then GOAWAY "
          "too_many_pings");
ABSL_FLAG(int, keepalive_max_ping_strikes, 2,
          "bad pings tolerated before GOAWAY (0 = unlimited)");
ABSL_FLAG(bool, keepalive_permit_without_calls, true,
          "allow keepalive pings on connections with no call in flight");
ABSL_FLAG(absl::Duration, max_connection_idle, absl::InfiniteDuration(),
          "close connections idle this long (inf = never)");
ABSL_FLAG(absl::Duration, max_connection_age, absl::InfiniteDuration(),
          "close connections older than this, so clients re-resolve and "
          "rebalance (inf = never)");
ABSL_FLAG(absl::Duration, max_connection_age_grace, absl::InfiniteDuration(),
          "after max_connection_age, calls in flight get this long to finish");
// --- Durability -------------------------------------------------------------
ABSL_FLAG(std::string, data_dir, "./data",
          "directory of the write-ahead log and snapshots (locked: one server "
          "per directory); empty keeps everything in memory only");
ABSL_FLAG(std::string, fsync, "interval",
          "when the write-ahead log is fsynced: always (before each write is "
          "acknowledged), interval (every --fsync_interval) or never (left to "
          "the OS); every acknowledged write survives a process crash");
ABSL_FLAG(absl::Duration, fsync_interval, absl::Seconds(1),
          "fsync period of the write-ahead log with --fsync=interval");
ABSL_FLAG(absl::Duration, snapshot_interval, absl::Minutes(10),
          "write a snapshot this often (0 = not by time)");
ABSL_FLAG(int64_t, snapshot_wal_bytes, int64_t{256} << 20,
          "write a snapshot when the write-ahead log has grown by this many "
          "bytes since the last one (0 = not by size)");
ABSL_FLAG(bool, strict_recovery, false,
          "refuse to start when the data_dir holds a corrupt snapshot or log "
          "record (default: start from the last good state, log an error)");
// --- TLS / mutual TLS on the serving port -----------------------------------
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the serving port (server certificate "
          "first); turns TLS on. Empty: plaintext");
ABSL_FLAG(std::string, tls_key, "",
          "PEM private key (unencrypted) of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle that client certificates must chain to; turns on "
          "mutual TLS (needs --tls_cert)");
ABSL_FLAG(bool, tls_require_client_cert, true,
          "with --tls_client_ca: refuse clients that present no certificate "
          "(false: verify a certificate only if one is presented)");
// --- Authorization by client identity, audit of admin RPCs ------------------
ABSL_FLAG(std::string, authz_policy, "",
          "file granting roles (read, write, admin) to client certificate "
          "identities, one \"<role>[,<role>] <kind>:<name>\" per line, kind "
          "dns, uri, email, ip or cn; "
          "each RPC then needs its role (docs/operations.md#authorization). "
          "Needs mutual TLS (--tls_client_ca). Empty: every client may call "
          "every RPC");
ABSL_FLAG(bool, audit_hash_user_ids, false,
          "audit lines of admin RPCs write sha256 pseudonyms of user ids "
          "instead of the ids");
// --- Scale-out: partition ownership -----------------------------------------
ABSL_FLAG(int32_t, partitions, 0,
          "partitions of the Kafka exposure topic (P); users are owned by "
          "partition = murmur2(user id) mod P. 0: not partitioned, this "
          "server owns every user");
ABSL_FLAG(int32_t, replicas, 1,
          "replicas sharing the partitions (N); replica r owns the partitions "
          "p with p mod N == r");
ABSL_FLAG(int32_t, replica_ordinal, -1,
          "this replica's ordinal r in [0, N); -1: from the hostname's "
          "-<ordinal> suffix (StatefulSet pod name) when --replicas > 1, "
          "else 0");
ABSL_FLAG(int32_t, replication_factor, 1,
          "owners of every partition (R, 1 <= R <= N): partition p is owned "
          "by replicas (p + i) mod N, i < R, each consuming it from Kafka; "
          "R >= 2 needs --kafka_brokers (docs/scale-out.md)");
ABSL_FLAG(absl::Duration, max_serving_lag, absl::Seconds(1),
          "--replication_factor >= 2: a copy lagging the Kafka log by more "
          "than this, or replaying it after its start, reports NOT_SERVING "
          "and answers reads UNAVAILABLE (clients use another owner); 0 "
          "turns the gate off (docs/scale-out.md)");
ABSL_FLAG(std::string, replica_address_template, "",
          "address of replica {ordinal}, named in the FAILED_PRECONDITION "
          "answer for another replica's user, e.g. "
          "\"exposure-filter-{ordinal}.exposure-filter:50051\" (the "
          "StatefulSet's headless Service); empty: the ordinal only");

// --- Kafka ingest: the optional consumer (docs/kafka.md) --------------------
ABSL_FLAG(std::string, kafka_brokers, "",
          "Kafka bootstrap servers (host:port,...); empty: no Kafka consumer");
ABSL_FLAG(std::string, kafka_topic, "exposures",
          "topic of exposure messages keyed by user id");
ABSL_FLAG(std::string, kafka_group, "exposure-filter",
          "consumer group: offsets are committed there once durable here "
          "(for lag tools), and are the start without a --data_dir");
ABSL_FLAG(std::string, kafka_format, "request",
          "message value encoding: request (protobuf RecordExposureRequest), "
          "exposure (protobuf Exposure), json (JSON Exposure)");
ABSL_FLAG(std::string, kafka_surface, "",
          "surface of exposure/json messages (\"\" = the default surface)");
ABSL_FLAG(int32_t, kafka_max_batch_messages, 5000,
          "record a Kafka batch when it holds this many messages...");
ABSL_FLAG(absl::Duration, kafka_max_batch_wait, absl::Milliseconds(50),
          "...or when its first message has waited this long");
ABSL_FLAG(std::string, kafka_start_offset, "earliest",
          "where a partition with no stored offset starts: earliest or "
          "latest");
ABSL_FLAG(absl::Duration, kafka_produce_timeout, absl::Seconds(5),
          "--replication_factor >= 2: how long a write RPC's messages may "
          "wait for Kafka's acknowledgement before it answers UNAVAILABLE");
ABSL_FLAG(std::vector<std::string>, kafka_config, {},
          "further librdkafka properties, name=value,... (e.g. "
          "security.protocol=SASL_SSL,sasl.mechanism=PLAIN)");

// --- Session stream (docs/session-stream.md) --------------------------------
ABSL_FLAG(int64_t, session_max_streams, 256,
          "session streams open at once; one more is ended at once with "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, session_max_subscriptions_per_stream, 100000,
          "subscriptions one session stream may hold; one more is refused "
          "(RESOURCE_EXHAUSTED inside the stream)");
ABSL_FLAG(int64_t, session_max_subscriptions, 1000000,
          "subscriptions of all session streams together");
ABSL_FLAG(int64_t, session_max_queue_bytes, int64_t{4} << 20,
          "bytes a session stream may have queued for its client; pushes "
          "past it are dropped and the stream resynced, reading pauses at "
          "half of it");
ABSL_FLAG(int64_t, session_max_queue_messages, 8192,
          "messages a session stream may have queued for its client (as "
          "--session_max_queue_bytes)");
ABSL_FLAG(absl::Duration, session_subscription_idle_timeout, absl::Minutes(10),
          "a subscription expires this long after the last request naming "
          "its user (the client renews it by subscribing again)");

namespace exposure_filter {
namespace {

constexpr const char* kEnvFlags[] = {
    "listen", "shards", "fp_rate", "retention", "slice_span", "surfaces",
    "max_surfaces", "max_id_bytes", "max_items_per_request",
    "max_exposures_per_request", "max_candidates_per_request",
    "max_future_skew", "max_receive_message_bytes", "sweep_interval",
    "shutdown_grace", "log_level",
    // Performance.
    "http2_max_frame_size", "tcp_read_chunk_size", "tcp_min_read_chunk_size",
    "tcp_max_read_chunk_size",
    // Operations
    "admin_listen", "memory_limit_bytes", "shutdown_delay", "keepalive_time",
    "keepalive_timeout", "keepalive_min_client_ping_interval",
    "keepalive_max_ping_strikes", "keepalive_permit_without_calls",
    "max_connection_idle", "max_connection_age", "max_connection_age_grace",
    // Reliability: overload protection.
    "grpc_memory_quota_bytes", "max_concurrent_streams", "max_inflight_rpcs",
    "max_inflight_request_bytes",
    // Traced users.
    "trace_users", "trace_max_users", "trace_max_entries_per_user",
    // Durability.
    "data_dir", "fsync", "fsync_interval", "snapshot_interval",
    "snapshot_wal_bytes", "strict_recovery",
    // TLS / mutual TLS.
    "tls_cert", "tls_key", "tls_client_ca", "tls_require_client_cert",
    // Authorization, audit.
    "authz_policy", "audit_hash_user_ids",
    // Kafka ingest.
    "kafka_brokers", "kafka_topic", "kafka_group", "kafka_format",
    "kafka_surface", "kafka_max_batch_messages", "kafka_max_batch_wait",
    "kafka_start_offset", "kafka_config", "kafka_produce_timeout",
    // Scale-out: partition ownership (deploy/ sets them by env).
    "partitions", "replicas", "replica_ordinal", "replica_address_template",
    // High availability.
    "replication_factor", "max_serving_lag",
    // Session stream.
    "session_max_streams", "session_max_subscriptions_per_stream",
    "session_max_subscriptions", "session_max_queue_bytes",
    "session_max_queue_messages", "session_subscription_idle_timeout"};

absl::Status Positive(const char* name, int value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, " must be positive, got ", value));
}

absl::Status NotNegative(const char* name, absl::Duration d) {
  if (d >= absl::ZeroDuration()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--", name, " must not be negative, got ", absl::FormatDuration(d)));
}

// The shutdown phases are waited out in full: an infinite one would never
// exit (and overflows gRPC's deadline arithmetic), so only the orchestrator's
// SIGKILL would end the process, without the final snapshot.
absl::Status ShutdownPhase(const char* name, absl::Duration d) {
  if (absl::Status s = NotNegative(name, d); !s.ok()) return s;
  if (d < absl::Hours(1)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, " must be below 1h (a shutdown phase is ",
                   "waited out in full), got ", absl::FormatDuration(d)));
}

// Operations flags.
absl::Status OperationsFromFlags(ServerConfig* c) {
  c->admin_listen_address = absl::GetFlag(FLAGS_admin_listen);
  const int64_t limit = absl::GetFlag(FLAGS_memory_limit_bytes);
  if (limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory_limit_bytes must not be negative, got ", limit));
  }
  c->memory_limit_bytes = static_cast<uint64_t>(limit);
  c->shutdown_delay = absl::GetFlag(FLAGS_shutdown_delay);
  c->shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  for (auto [name, d] : {std::pair{"shutdown_delay", c->shutdown_delay},
                         {"shutdown_grace", c->shutdown_grace}}) {
    if (absl::Status s = ShutdownPhase(name, d); !s.ok()) return s;
  }
  KeepaliveOptions& k = c->keepalive;
  k.time = absl::GetFlag(FLAGS_keepalive_time);
  k.timeout = absl::GetFlag(FLAGS_keepalive_timeout);
  k.min_client_ping_interval =
      absl::GetFlag(FLAGS_keepalive_min_client_ping_interval);
  k.max_ping_strikes = absl::GetFlag(FLAGS_keepalive_max_ping_strikes);
  k.permit_without_calls = absl::GetFlag(FLAGS_keepalive_permit_without_calls);
  k.max_connection_idle = absl::GetFlag(FLAGS_max_connection_idle);
  k.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  k.max_connection_age_grace = absl::GetFlag(FLAGS_max_connection_age_grace);
  for (auto [name, d] :
       {std::pair{"keepalive_time", k.time},
        {"keepalive_timeout", k.timeout},
        {"keepalive_min_client_ping_interval", k.min_client_ping_interval},
        {"max_connection_idle", k.max_connection_idle},
        {"max_connection_age", k.max_connection_age},
        {"max_connection_age_grace", k.max_connection_age_grace}}) {
    if (absl::Status s = NotNegative(name, d); !s.ok()) return s;
  }
  if (k.max_ping_strikes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--keepalive_max_ping_strikes must not be negative, got ",
                     k.max_ping_strikes));
  }
  return absl::OkStatus();
}

// Overload protection flags.
absl::Status OverloadFromFlags(OverloadOptions* o) {
  o->grpc_memory_quota_bytes = absl::GetFlag(FLAGS_grpc_memory_quota_bytes);
  o->max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  const int64_t rpcs = absl::GetFlag(FLAGS_max_inflight_rpcs);
  const int64_t bytes = absl::GetFlag(FLAGS_max_inflight_request_bytes);
  for (auto [name, value] :
       {std::pair{"grpc_memory_quota_bytes", o->grpc_memory_quota_bytes},
        {"max_concurrent_streams", int64_t{o->max_concurrent_streams}},
        {"max_inflight_rpcs", rpcs},
        {"max_inflight_request_bytes", bytes}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " must not be negative (0 = no limit), got ", value));
    }
  }
  o->admission.max_inflight_rpcs = static_cast<uint64_t>(rpcs);
  o->admission.max_inflight_request_bytes = static_cast<uint64_t>(bytes);
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyEnvironmentOverrides() {
  for (const char* name : kEnvFlags) {
    const std::string var =
        absl::StrCat("EXPOSURE_FILTER_", absl::AsciiStrToUpper(name));
    const char* value = std::getenv(var.c_str());
    if (value == nullptr) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string error;
    if (flag == nullptr || !flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat(var, "=\"", value, "\": ", error));
    }
  }
  return absl::OkStatus();
}

namespace {

// Scale-out: --partitions, --replicas, --replica_ordinal (or the
// ordinal in the StatefulSet hostname).
absl::Status ClusterFromFlags(ClusterOptions* cluster) {
  cluster->partitions = absl::GetFlag(FLAGS_partitions);
  cluster->replicas = absl::GetFlag(FLAGS_replicas);
  cluster->replica_ordinal = absl::GetFlag(FLAGS_replica_ordinal);
  cluster->replication_factor = absl::GetFlag(FLAGS_replication_factor);
  if (cluster->replica_ordinal == -1) {
    cluster->replica_ordinal = 0;
    // Without partitions, Validate() names the real mistake below.
    if (cluster->replicas > 1 && cluster->partitions > 0) {
      char host[256] = {};
      if (gethostname(host, sizeof(host) - 1) != 0) {
        return absl::InvalidArgumentError(
            "--replica_ordinal=-1 but gethostname() failed; set it");
      }
      absl::StatusOr<int32_t> ordinal = OrdinalFromHostname(host);
      if (!ordinal.ok()) return ordinal.status();
      cluster->replica_ordinal = *ordinal;
    }
  }
  return cluster->Validate();
}

}  // namespace

absl::StatusOr<ServerConfig> ConfigFromFlags() {
  ServerConfig c;
  c.listen_address = absl::GetFlag(FLAGS_listen);
  c.shards = absl::GetFlag(FLAGS_shards);
  c.default_policy.fp_rate = absl::GetFlag(FLAGS_fp_rate);
  c.default_policy.retention = absl::GetFlag(FLAGS_retention);
  c.default_policy.slice_span = absl::GetFlag(FLAGS_slice_span);
  absl::StatusOr<std::vector<std::pair<std::string, FilterPolicyOptions>>> ov =
      ParseSurfaceOverrides(absl::GetFlag(FLAGS_surfaces), c.default_policy);
  if (!ov.ok()) return ov.status();
  c.surface_overrides = *std::move(ov);
  const int max_surfaces = absl::GetFlag(FLAGS_max_surfaces);
  const int max_id = absl::GetFlag(FLAGS_max_id_bytes);
  const int max_items = absl::GetFlag(FLAGS_max_items_per_request);
  const int max_exposures = absl::GetFlag(FLAGS_max_exposures_per_request);
  const int max_candidates = absl::GetFlag(FLAGS_max_candidates_per_request);
  c.max_receive_message_bytes = absl::GetFlag(FLAGS_max_receive_message_bytes);
  for (auto [name, value] :
       {std::pair{"max_surfaces", max_surfaces},
        {"max_id_bytes", max_id},
        {"max_items_per_request", max_items},
        {"max_exposures_per_request", max_exposures},
        {"max_candidates_per_request", max_candidates},
        {"max_receive_message_bytes", c.max_receive_message_bytes}}) {
    if (absl::Status s = Positive(name, value); !s.ok()) return s;
  }
  c.max_surfaces = max_surfaces;
  c.limits.max_id_bytes = max_id;
  c.limits.max_items_per_request = max_items;
  c.limits.max_exposures_per_request = max_exposures;
  c.limits.max_candidates_per_request = max_candidates;
  c.limits.max_future_skew = absl::GetFlag(FLAGS_max_future_skew);
  c.sweep_interval = absl::GetFlag(FLAGS_sweep_interval);
  if (c.sweep_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--sweep_interval must be positive");
  }
  // Performance: transport tuning.
  c.transport.http2_max_frame_size = absl::GetFlag(FLAGS_http2_max_frame_size);
  c.transport.tcp_read_chunk_size = absl::GetFlag(FLAGS_tcp_read_chunk_size);
  c.transport.tcp_min_read_chunk_size =
      absl::GetFlag(FLAGS_tcp_min_read_chunk_size);
  c.transport.tcp_max_read_chunk_size =
      absl::GetFlag(FLAGS_tcp_max_read_chunk_size);
  if (absl::Status s = c.transport.Validate(); !s.ok()) return s;
  if (absl::Status s = OperationsFromFlags(&c); !s.ok()) return s;
  if (absl::Status s = OverloadFromFlags(&c.overload); !s.ok()) return s;
  // Traced users.
  const int trace_max_users = absl::GetFlag(FLAGS_trace_max_users);
  const int trace_max_entries = absl::GetFlag(FLAGS_trace_max_entries_per_user);
  if (trace_max_users < 0 || trace_max_entries < 0) {
    return absl::InvalidArgumentError(
        "--trace_max_users and --trace_max_entries_per_user must be >= 0");
  }
  c.trace_limits.max_users = trace_max_users;
  c.trace_limits.max_entries_per_user = trace_max_entries;
  for (const std::string& user : absl::GetFlag(FLAGS_trace_users)) {
    if (user.empty() || user.size() > c.limits.max_id_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--trace_users: user id '", user, "' is empty or longer than ",
          c.limits.max_id_bytes, " bytes (--max_id_bytes)"));
    }
    c.trace_users.push_back(user);
  }
  if (c.trace_users.size() > c.trace_limits.max_users) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--trace_users lists ", c.trace_users.size(), " users, more than ",
        "--trace_max_users=", c.trace_limits.max_users));
  }
  // Durability.
  c.durability.data_dir = absl::GetFlag(FLAGS_data_dir);
  absl::StatusOr<FsyncPolicy> fsync =
      ParseFsyncPolicy(absl::GetFlag(FLAGS_fsync));
  if (!fsync.ok()) return fsync.status();
  c.durability.fsync = *fsync;
  c.durability.fsync_interval = absl::GetFlag(FLAGS_fsync_interval);
  if (c.durability.fsync_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--fsync_interval must be positive");
  }
  c.durability.snapshot_interval = absl::GetFlag(FLAGS_snapshot_interval);
  const int64_t wal_bytes = absl::GetFlag(FLAGS_snapshot_wal_bytes);
  if (c.durability.snapshot_interval < absl::ZeroDuration() || wal_bytes < 0) {
    return absl::InvalidArgumentError(
        "--snapshot_interval and --snapshot_wal_bytes must not be negative");
  }
  c.durability.snapshot_wal_bytes = static_cast<uint64_t>(wal_bytes);
  c.durability.strict_recovery = absl::GetFlag(FLAGS_strict_recovery);
  // TLS / mutual TLS. The files are read and checked at Start().
  c.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  c.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  c.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  c.tls.require_client_cert = absl::GetFlag(FLAGS_tls_require_client_cert);
  if (c.tls.cert_file.empty() != c.tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key must be given together");
  }
  if (!c.tls.client_ca_file.empty() && !c.tls.enabled()) {
    return absl::InvalidArgumentError(
        "--tls_client_ca (mutual TLS) needs --tls_cert and --tls_key");
  }
  // Authorization: the policy is read, and checked against the TLS mode,
  // at Start().
  c.authorization.policy_file = absl::GetFlag(FLAGS_authz_policy);
  c.authorization.audit_hash_user_ids =
      absl::GetFlag(FLAGS_audit_hash_user_ids);
  if (absl::Status s = ClusterFromFlags(&c.cluster); !s.ok()) return s;
  // Kafka ingest.
  c.kafka.brokers = absl::GetFlag(FLAGS_kafka_brokers);
  c.kafka.topic = absl::GetFlag(FLAGS_kafka_topic);
  c.kafka.group = absl::GetFlag(FLAGS_kafka_group);
  if (absl::Status s = ParseKafkaMessageFormat(
          absl::GetFlag(FLAGS_kafka_format), &c.kafka.format);
      !s.ok()) {
    return s;
  }
  c.kafka.surface = absl::GetFlag(FLAGS_kafka_surface);
  if (absl::Status s = Positive("--kafka_max_batch_messages",
                                absl::GetFlag(FLAGS_kafka_max_batch_messages));
      !s.ok()) {
    return s;
  }
  c.kafka.max_batch_messages = absl::GetFlag(FLAGS_kafka_max_batch_messages);
  c.kafka.max_batch_wait = absl::GetFlag(FLAGS_kafka_max_batch_wait);
  c.kafka.start_offset = absl::GetFlag(FLAGS_kafka_start_offset);
  c.kafka.produce_timeout = absl::GetFlag(FLAGS_kafka_produce_timeout);
  for (const std::string& kv : absl::GetFlag(FLAGS_kafka_config)) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kafka_config: \"", kv, "\" is not name=value"));
    }
    c.kafka.librdkafka_config.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (absl::Status s = c.kafka.Validate(); !s.ok()) return s;
  if (absl::Status s = c.cluster.ValidateWithIngest(c.kafka.enabled());
      !s.ok()) {
    return s;
  }
  c.replica_address_template = absl::GetFlag(FLAGS_replica_address_template);
  c.max_serving_lag = absl::GetFlag(FLAGS_max_serving_lag);
  if (absl::Status s = ValidateMaxServingLag(c.max_serving_lag); !s.ok()) {
    return s;
  }
  c.session.max_streams = absl::GetFlag(FLAGS_session_max_streams);
  c.session.max_subscriptions_per_stream =
      absl::GetFlag(FLAGS_session_max_subscriptions_per_stream);
  c.session.max_subscriptions = absl::GetFlag(FLAGS_session_max_subscriptions);
  c.session.max_queue_bytes = absl::GetFlag(FLAGS_session_max_queue_bytes);
  c.session.max_queue_messages =
      absl::GetFlag(FLAGS_session_max_queue_messages);
  c.session.subscription_idle_timeout =
      absl::GetFlag(FLAGS_session_subscription_idle_timeout);
  if (absl::Status s = c.session.Validate(); !s.ok()) return s;
  return c;
}

std::string LogLevelFlag() { return absl::GetFlag(FLAGS_log_level); }

std::string ServerConfig::Summary() const {
  std::vector<std::string> surfaces;
  for (const auto& [name, p] : surface_overrides) {
    surfaces.push_back(absl::StrFormat(
        "%s(fp=%g,retention=%s,span=%s)", name, p.fp_rate,
        absl::FormatDuration(p.retention), absl::FormatDuration(p.slice_span)));
  }
  return absl::StrFormat(
      "listen=%s shards=%d fp_rate=%g retention=%s slice_span=%s "
      "surfaces=[%s] max_surfaces=%d max_id_bytes=%d "
      "max_items_per_request=%d max_exposures_per_request=%d "
      "max_candidates_per_request=%d max_future_skew=%s "
      "max_receive_message_bytes=%d sweep_interval=%s shutdown_grace=%s "
      "admin_listen=%s memory_limit_bytes=%d shutdown_delay=%s "
      "keepalive_time=%s keepalive_timeout=%s "
      "keepalive_min_client_ping_interval=%s max_connection_idle=%s "
      "max_connection_age=%s "
      "trace_users=%d trace_max_users=%d trace_max_entries_per_user=%d "
      "tls=%s partitions=%d replicas=%d replica_ordinal=%d "
      "replication_factor=%d "
      "grpc_memory_quota_bytes=%d max_concurrent_streams=%d "
      "max_inflight_rpcs=%d max_inflight_request_bytes=%d kafka=%s "
      "session_max_streams=%d session_max_subscriptions_per_stream=%d "
      "session_max_subscriptions=%d session_max_queue_bytes=%d "
      "session_max_queue_messages=%d session_subscription_idle_timeout=%s",
      listen_address, shards, default_policy.fp_rate,
      absl::FormatDuration(default_policy.retention),
      absl::FormatDuration(default_policy.slice_span),
      absl::StrJoin(surfaces, ","), max_surfaces, limits.max_id_bytes,
      limits.max_items_per_request, limits.max_exposures_per_request,
      limits.max_candidates_per_request,
      absl::FormatDuration(limits.max_future_skew), max_receive_message_bytes,
      absl::FormatDuration(sweep_interval),
      absl::FormatDuration(shutdown_grace),
      admin_listen_address.empty() ? "off" : admin_listen_address,
      memory_limit_bytes, absl::FormatDuration(shutdown_delay),
      absl::FormatDuration(keepalive.time),
      absl::FormatDuration(keepalive.timeout),
      absl::FormatDuration(keepalive.min_client_ping_interval),
      absl::FormatDuration(keepalive.max_connection_idle),
      absl::FormatDuration(keepalive.max_connection_age), trace_users.size(),
      trace_limits.max_users, trace_limits.max_entries_per_user,
      TlsModeName(tls), cluster.partitions, cluster.replicas,
      cluster.replica_ordinal, cluster.replication_factor,
      overload.grpc_memory_quota_bytes, overload.max_concurrent_streams,
      overload.admission.max_inflight_rpcs,
      overload.admission.max_inflight_request_bytes,
      kafka.enabled() ? absl::StrCat(kafka.brokers, "/", kafka.topic, "/",
                                     KafkaMessageFormatName(kafka.format))
                      : "off",
      session.max_streams, session.max_subscriptions_per_stream,
      session.max_subscriptions, session.max_queue_bytes,
      session.max_queue_messages,
      absl::FormatDuration(session.subscription_idle_timeout));
}

}  // namespace exposure_filter
