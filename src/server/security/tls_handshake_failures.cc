#include "src/server/security/tls_handshake_failures.h"

#include <grpc/support/log.h>
#include <spdlog/spdlog.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "src/server/observability/metric_families.h"
#include "src/server/security/caller_identity.h"

namespace exposure_filter {
namespace {

constexpr const char* kReasonNames[kNumHandshakeFailureReasons] = {
    "no_client_certificate", "certificate_rejected", "not_tls",
    "client_alert",          "protocol_mismatch",    "other"};

// gRPC 1.51's TLS layer (src/core/tsi/ssl_transport_security.cc) logs each
// failed handshake at error level as
//   Handshake failed with fatal error <SSL_ERROR_...>: <OpenSSL error>.
// The e2e test tests/e2e/test_tls.py fails if a gRPC upgrade changes it.
constexpr absl::string_view kTsiFile = "ssl_transport_security.cc";
constexpr absl::string_view kHandshakeFailed =
    "Handshake failed with fatal error ";

// Where handshake failures go; null before RouteGrpcLogs and after
// StopRoutingHandshakeFailures. Held while Record runs, so that Stop...
// returns only once no Record on the old target is in progress.
ABSL_CONST_INIT absl::Mutex g_route_mu(absl::kConstInit);
TlsHandshakeFailures* g_failures ABSL_GUARDED_BY(g_route_mu) = nullptr;

spdlog::level::level_enum LevelOf(gpr_log_severity severity) {
  switch (severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      return spdlog::level::debug;
    case GPR_LOG_SEVERITY_INFO:
      return spdlog::level::info;
    case GPR_LOG_SEVERITY_ERROR:
      break;
  }
  return spdlog::level::err;
}

void OnGrpcLog(gpr_log_func_args* args) {
  const absl::string_view file = args->file == nullptr ? "" : args->file;
  absl::string_view message = args->message == nullptr ? "" : args->message;
  if (absl::EndsWith(file, kTsiFile) &&
      absl::ConsumePrefix(&message, kHandshakeFailed)) {
    absl::MutexLock lock(&g_route_mu);
    if (g_failures != nullptr) {
      g_failures->Record(message);
      return;
    }
    message = args->message;
  }
  const size_t slash = file.rfind('/');
  spdlog::log(
      LevelOf(args->severity), "event=grpc_log at={}:{} msg={}",
      std::string(slash == absl::string_view::npos ? file
                                                   : file.substr(slash + 1)),
      args->line, LogQuoted(message));
}

}  // namespace

const char* HandshakeFailureReasonName(HandshakeFailureReason reason) {
  return kReasonNames[static_cast<int>(reason)];
}

HandshakeFailureReason ClassifyHandshakeError(absl::string_view error) {
  // OpenSSL 3's reason strings (ssl/ssl_err.c) for what a TLS server
  // refuses; the first match wins, most specific first.
  auto any_of = [error](std::initializer_list<absl::string_view> texts) {
    for (absl::string_view text : texts) {
      if (absl::StrContains(error, text)) return true;
    }
    return false;
  };
  if (any_of({"peer did not return a certificate"})) {
    return HandshakeFailureReason::kNoClientCertificate;
  }
  if (any_of({"certificate verify failed"})) {
    return HandshakeFailureReason::kCertificateRejected;
  }
  if (any_of({"wrong version number", "http request", "https proxy request",
              "packet length too long", "unknown protocol"})) {
    return HandshakeFailureReason::kNotTls;
  }
  if (any_of({" alert "})) return HandshakeFailureReason::kClientAlert;
  if (any_of({"unsupported protocol", "no shared cipher",
              "no suitable signature algorithm", "version too low",
              "no protocols available", "no shared signature algorithms"})) {
    return HandshakeFailureReason::kProtocolMismatch;
  }
  return HandshakeFailureReason::kOther;
}

void TlsHandshakeFailures::Record(absl::string_view error) {
  const HandshakeFailureReason reason = ClassifyHandshakeError(error);
  counts_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  uint64_t suppressed = 0;
  if (log_.Allow(&suppressed)) {
    spdlog::warn(
        "event=tls_handshake_refused reason={} error={} suppressed={} "
        "msg=\"a client's TLS handshake was refused (peer address and "
        "certificate are not reported by gRPC)\"",
        HandshakeFailureReasonName(reason),
        LogQuoted(absl::StripSuffix(error, ".")), suppressed);
  }
}

std::vector<prometheus::MetricFamily> TlsHandshakeFailures::Collect() const {
  prometheus::MetricFamily failures =
      MakeFamily("exposure_filter_tls_handshake_failures_total",
                 "TLS handshakes the serving port refused, by reason",
                 prometheus::MetricType::Counter);
  // Every series exists from the first scrape, so rate() sees the first
  // refusal.
  for (int i = 0; i < kNumHandshakeFailureReasons; ++i) {
    AddSample(
        failures, {{"reason", kReasonNames[i]}},
        static_cast<double>(count(static_cast<HandshakeFailureReason>(i))));
  }
  return {std::move(failures)};
}

void RouteGrpcLogs(TlsHandshakeFailures* failures) {
  {
    absl::MutexLock lock(&g_route_mu);
    g_failures = failures;
  }
  gpr_set_log_function(OnGrpcLog);
}

void StopRoutingHandshakeFailures(const TlsHandshakeFailures* failures) {
  absl::MutexLock lock(&g_route_mu);
  if (g_failures == failures) g_failures = nullptr;
}

}  // namespace exposure_filter
