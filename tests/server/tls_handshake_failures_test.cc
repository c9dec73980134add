// Refused TLS handshakes: how gRPC's handshake error text maps onto a
// reason, and that RouteGrpcLogs counts gRPC's "Handshake failed" lines
// and logs them (rate-limited) while other gRPC lines pass through spdlog.
// Real refused handshakes against the server binary are counted in
// tests/e2e/test_tls.py.
#include "src/server/security/tls_handshake_failures.h"

#include <grpc/support/log.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ClassifyHandshakeErrorTest, OpenSslReasonsOfRefusalsMapOntoReasons) {
  // The texts gRPC 1.51 logs with Debian's OpenSSL 3 for a client without a
  // certificate, one from another CA and a plaintext client.
  EXPECT_EQ(ClassifyHandshakeError("SSL_ERROR_SSL: error:0A0000C7:SSL "
                                   "routines::peer did not return a "
                                   "certificate."),
            HandshakeFailureReason::kNoClientCertificate);
  EXPECT_EQ(ClassifyHandshakeError("SSL_ERROR_SSL: error:0A000086:SSL "
                                   "routines::certificate verify failed."),
            HandshakeFailureReason::kCertificateRejected);
  EXPECT_EQ(ClassifyHandshakeError("SSL_ERROR_SSL: error:0A00010B:SSL "
                                   "routines::wrong version number."),
            HandshakeFailureReason::kNotTls);
  EXPECT_EQ(ClassifyHandshakeError("SSL_ERROR_SSL: error:0A000418:SSL "
                                   "routines::tlsv1 alert unknown ca."),
            HandshakeFailureReason::kClientAlert);
  EXPECT_EQ(ClassifyHandshakeError("SSL_ERROR_SSL: error:0A000102:SSL "
                                   "routines::unsupported protocol."),
            HandshakeFailureReason::kProtocolMismatch);
  EXPECT_EQ(ClassifyHandshakeError("SSL_ERROR_SYSCALL: something else."),
            HandshakeFailureReason::kOther);
}

TEST(TlsHandshakeFailuresTest, ExportsEveryReasonFromTheFirstScrape) {
  TlsHandshakeFailures failures;
  failures.Record(
      "SSL_ERROR_SSL: error:0A000086:SSL routines::certificate "
      "verify failed.");
  const std::vector<prometheus::MetricFamily> families = failures.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "exposure_filter_tls_handshake_failures_total");
  ASSERT_EQ(families[0].metric.size(),
            static_cast<size_t>(kNumHandshakeFailureReasons));
  for (const prometheus::ClientMetric& m : families[0].metric) {
    ASSERT_EQ(m.label.size(), 1u);
    EXPECT_EQ(m.label[0].name, "reason");
    EXPECT_EQ(m.counter.value,
              m.label[0].value == "certificate_rejected" ? 1 : 0)
        << m.label[0].value;
  }
}

class RouteGrpcLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // gRPC drops every log line until grpc_init() has read GRPC_VERBOSITY;
    // this test process never starts gRPC, so read it here (default:
    // errors, which the handshake failure line is).
    gpr_log_verbosity_init();
    previous_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_)));
  }
  void TearDown() override {
    StopRoutingHandshakeFailures(&failures_);
    spdlog::set_default_logger(previous_);
  }
  // A line as gRPC's TLS layer writes it for a refused handshake.
  static void LogHandshakeFailure(const char* openssl_error) {
    gpr_log("src/core/tsi/ssl_transport_security.cc", 1501,
            GPR_LOG_SEVERITY_ERROR, "Handshake failed with fatal error %s: %s.",
            "SSL_ERROR_SSL", openssl_error);
  }

  TlsHandshakeFailures failures_;
  std::ostringstream log_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(RouteGrpcLogsTest, HandshakeFailuresAreCountedAndLoggedOncePerInterval) {
  RouteGrpcLogs(&failures_);
  LogHandshakeFailure("error:0A000086:SSL routines::certificate verify failed");
  LogHandshakeFailure("error:0A000086:SSL routines::certificate verify failed");
  LogHandshakeFailure(
      "error:0A0000C7:SSL routines::peer did not return a "
      "certificate");
  EXPECT_EQ(failures_.count(HandshakeFailureReason::kCertificateRejected), 2u);
  EXPECT_EQ(failures_.count(HandshakeFailureReason::kNoClientCertificate), 1u);
  EXPECT_THAT(log_.str(),
              HasSubstr("event=tls_handshake_refused "
                        "reason=certificate_rejected error=\"SSL_ERROR_SSL: "
                        "error:0A000086:SSL routines::certificate verify "
                        "failed\" suppressed=0"));
  // The other two fell within the same interval.
  EXPECT_THAT(log_.str(), Not(HasSubstr("reason=no_client_certificate")));
  EXPECT_THAT(log_.str(), Not(HasSubstr("event=grpc_log")));
}

TEST_F(RouteGrpcLogsTest, OtherGrpcLinesGoToSpdlogUncounted) {
  RouteGrpcLogs(&failures_);
  gpr_log("src/core/ext/transport/chttp2/server/chttp2_server.cc", 448,
          GPR_LOG_SEVERITY_ERROR, "Handshake failed with fatal error %s", "x");
  EXPECT_THAT(log_.str(), HasSubstr("event=grpc_log at=chttp2_server.cc:448 "
                                    "msg=\"Handshake failed with fatal "
                                    "error x\""));
  StopRoutingHandshakeFailures(&failures_);
  LogHandshakeFailure("error:0A00010B:SSL routines::wrong version number");
  EXPECT_THAT(log_.str(),
              HasSubstr("event=grpc_log at=ssl_transport_security.cc:1501 "
                        "msg=\"Handshake failed with fatal error "));
  for (int i = 0; i < kNumHandshakeFailureReasons; ++i) {
    EXPECT_EQ(failures_.count(static_cast<HandshakeFailureReason>(i)), 0u);
  }
}

}  // namespace
}  // namespace exposure_filter
