// ServerConfig: everything the server is told at startup. main() fills it
// from flags (server_flags.cc), tests fill it directly.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SERVER_CONFIG_H_
#define EXPOSURE_FILTER_SRC_SERVER_SERVER_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "src/filter/filter_policy.h"
#include "src/server/transport_tuning.h"
#include "src/persist/store_durability.h"

namespace exposure_filter {

struct RequestLimits {
  size_t max_id_bytes = 256;                  // user ids and item keys
  size_t max_items_per_request = 100000;      // RecordExposure, all users
  size_t max_exposures_per_request = 10000;   // RecordExposure users
  size_t max_candidates_per_request = 100000; // FilterRecalled ids + keys
  absl::Duration max_future_skew = absl::Minutes(5);
};

// Transport security of the serving port (issue 10: TLS/mTLS). Empty
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
  // Issue 10 (TLS/mTLS): transport security of the serving port.
  TlsOptions tls;
  // Performance (issue 9): HTTP/2 frame and TCP read-chunk sizes.
  TransportTuning transport;

  // --- Durability (issue 4): write-ahead log, snapshots, recovery. ---
  // durability.data_dir empty (the default here, for in-process tests) keeps
  // everything in memory only; the --data_dir flag defaults to ./data.
  DurabilityOptions durability;

  // Human-readable one-line summary for the startup log.
  std::string Summary() const;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SERVER_CONFIG_H_
