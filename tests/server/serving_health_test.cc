// ServingHealth: SERVING only while reads are ready and writes can be
// taken; neither condition can undo the other's NOT_SERVING, and Stop
// (shutdown's drain) is final.
#include "src/server/serving_health.h"

#include <grpcpp/health_check_service_interface.h>

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

constexpr char kService[] = "exposure.v1.ExposureFilter";

// Records the last status set, per service ("" = the server's overall one).
class RecordingHealth final : public grpc::HealthCheckServiceInterface {
 public:
  void SetServingStatus(const std::string& service, bool serving) override {
    status[service] = serving;
  }
  void SetServingStatus(bool serving) override { status[""] = serving; }
  // Both the service's and the overall status agree on `serving`.
  bool Is(bool serving) const {
    return status.count(kService) == 1 && status.count("") == 1 &&
           status.at(kService) == serving && status.at("") == serving;
  }
  std::map<std::string, bool> status;
};

TEST(ServingHealthTest, ServesOnlyWhileReadsAndWritesAreReady) {
  RecordingHealth grpc_health;
  ServingHealth health(&grpc_health, kService);
  health.SetReadsReady(true);
  EXPECT_TRUE(grpc_health.Is(true));
  EXPECT_TRUE(health.serving());
  health.SetWritesReady(false);
  EXPECT_TRUE(grpc_health.Is(false));
  EXPECT_FALSE(health.serving());
  health.SetWritesReady(true);
  EXPECT_TRUE(grpc_health.Is(true));
}

TEST(ServingHealthTest, TheLagMonitorCannotUndoAProducerRebuild) {
  RecordingHealth grpc_health;
  ServingHealth health(&grpc_health, kService);
  health.SetReadsReady(true);
  health.SetWritesReady(false);  // a fatal producer error
  health.SetReadsReady(false);   // the lag monitor flips...
  health.SetReadsReady(true);    // ...and back, while the rebuild runs
  EXPECT_TRUE(grpc_health.Is(false));
  health.SetWritesReady(true);
  EXPECT_TRUE(grpc_health.Is(true));
}

TEST(ServingHealthTest, StopIsFinal) {
  RecordingHealth grpc_health;
  ServingHealth health(&grpc_health, kService);
  health.SetReadsReady(true);
  health.Stop();
  EXPECT_TRUE(grpc_health.Is(false));
  health.SetWritesReady(true);  // a rebuild finishing during the drain
  health.SetReadsReady(true);
  EXPECT_TRUE(grpc_health.Is(false));
  EXPECT_FALSE(health.serving());
}

}  // namespace
}  // namespace exposure_filter
