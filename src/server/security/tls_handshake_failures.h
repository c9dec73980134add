// TlsHandshakeFailures: the TLS handshakes the serving port refuses,
// counted by reason and logged (one warning per 10 s, with the number held
// back), on /metrics as
//   exposure_filter_tls_handshake_failures_total{reason}
// reason:
//   no_client_certificate   mutual TLS requires one and none was presented
//   certificate_rejected    the client certificate does not verify against
//                           --tls_client_ca: another CA, expired, not yet
//                           valid, a bad signature (OpenSSL's handshake error
//                           does not say which)
//   not_tls                 the client spoke something else (plaintext gRPC,
//                           HTTP/1)
//   client_alert            the client ended the handshake, e.g. because it
//                           does not trust the server certificate
//   protocol_mismatch       no TLS version or cipher both sides accept
//   other                   any other handshake error
//
// Where they come from: gRPC 1.51's C++ API has no hook that sees a
// refused handshake. grpc::SslServerCredentials takes none; the
// experimental TlsServerCredentials' certificate verifier runs after
// OpenSSL has verified the chain, so with the client certificate request
// modes the server uses (..._AND_VERIFY) it never sees a refused one, and
// seeing them would mean verifying the chain in our code instead of
// OpenSSL's. What gRPC does produce for every refused handshake is one
// error-level log line from its TLS layer ("Handshake failed with fatal
// error SSL_ERROR_SSL: ...<OpenSSL's reason>."): RouteGrpcLogs() installs a
// gRPC log function that hands those lines to a TlsHandshakeFailures and
// writes every other gRPC log line through spdlog. That line names neither
// the peer's address nor its certificate, so neither does ours.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_TLS_HANDSHAKE_FAILURES_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_TLS_HANDSHAKE_FAILURES_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "src/base/log_rate_limiter.h"

namespace exposure_filter {

enum class HandshakeFailureReason : uint8_t {
  kNoClientCertificate = 0,
  kCertificateRejected = 1,
  kNotTls = 2,
  kClientAlert = 3,
  kProtocolMismatch = 4,
  kOther = 5,
};
inline constexpr int kNumHandshakeFailureReasons = 6;

// "no_client_certificate", ... (the label values above).
const char* HandshakeFailureReasonName(HandshakeFailureReason reason);

// The reason of gRPC's handshake error text, e.g. "SSL_ERROR_SSL:
// error:0A000086:SSL routines::certificate verify failed.".
HandshakeFailureReason ClassifyHandshakeError(absl::string_view error);

class TlsHandshakeFailures final : public prometheus::Collectable {
 public:
  // Counts one refused handshake whose error is `error` (gRPC's text after
  // "Handshake failed with fatal error ") and logs it, rate-limited.
  void Record(absl::string_view error);

  uint64_t count(HandshakeFailureReason reason) const {
    return counts_[static_cast<int>(reason)].load(std::memory_order_relaxed);
  }

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::atomic<uint64_t> counts_[kNumHandshakeFailureReasons] = {};
  // A client with the wrong certificate reconnects with backoff, a scanner
  // at full speed: one warning per interval, with the count it stood for.
  LogRateLimiter log_{absl::Seconds(10)};
};

// Installs the process's gRPC log function (gRPC has one per process):
// handshake failures go to `failures`, every other gRPC log line to spdlog
// (event=grpc_log, at gRPC's severity; GRPC_VERBOSITY still decides what
// gRPC emits, and GRPC_VERBOSITY=NONE hides the handshake failures too).
// The last call wins. `failures` must stay alive until
// StopRoutingHandshakeFailures(failures).
void RouteGrpcLogs(TlsHandshakeFailures* failures);
// Stops handing handshake failures to `failures` if it is the installed
// one (they are then written as other gRPC lines are). Returns after any
// Record() on `failures` in progress.
void StopRoutingHandshakeFailures(const TlsHandshakeFailures* failures);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_TLS_HANDSHAKE_FAILURES_H_
