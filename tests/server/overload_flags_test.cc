// Overload protection flags: defaults, environment overrides,
// validation. Flags and the environment are process-global: every test
// restores both.
#include <cstdint>
#include <cstdlib>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/config/server_flags.h"

ABSL_DECLARE_FLAG(int64_t, grpc_memory_quota_bytes);
ABSL_DECLARE_FLAG(int, max_concurrent_streams);
ABSL_DECLARE_FLAG(int64_t, max_inflight_rpcs);
ABSL_DECLARE_FLAG(int64_t, max_inflight_request_bytes);

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;

class OverloadFlagsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("EXPOSURE_FILTER_MAX_INFLIGHT_RPCS");
    unsetenv("EXPOSURE_FILTER_GRPC_MEMORY_QUOTA_BYTES");
    const OverloadOptions defaults;
    absl::SetFlag(&FLAGS_grpc_memory_quota_bytes,
                  defaults.grpc_memory_quota_bytes);
    absl::SetFlag(&FLAGS_max_concurrent_streams,
                  defaults.max_concurrent_streams);
    absl::SetFlag(&FLAGS_max_inflight_rpcs,
                  static_cast<int64_t>(defaults.admission.max_inflight_rpcs));
    absl::SetFlag(
        &FLAGS_max_inflight_request_bytes,
        static_cast<int64_t>(defaults.admission.max_inflight_request_bytes));
  }
};

TEST_F(OverloadFlagsTest, DefaultsMatchServerConfig) {
  absl::StatusOr<ServerConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  const OverloadOptions defaults;
  EXPECT_EQ(c->overload.grpc_memory_quota_bytes,
            defaults.grpc_memory_quota_bytes);
  EXPECT_EQ(c->overload.max_concurrent_streams,
            defaults.max_concurrent_streams);
  EXPECT_EQ(c->overload.admission.max_inflight_rpcs,
            defaults.admission.max_inflight_rpcs);
  EXPECT_EQ(c->overload.admission.max_inflight_request_bytes,
            defaults.admission.max_inflight_request_bytes);
  EXPECT_THAT(c->Summary(), HasSubstr("max_inflight_rpcs="));
}

TEST_F(OverloadFlagsTest, EnvironmentSetsLimits) {
  setenv("EXPOSURE_FILTER_MAX_INFLIGHT_RPCS", "12", 1);
  setenv("EXPOSURE_FILTER_GRPC_MEMORY_QUOTA_BYTES", "0", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  absl::StatusOr<ServerConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->overload.admission.max_inflight_rpcs, 12u);
  EXPECT_EQ(c->overload.grpc_memory_quota_bytes, 0);
}

TEST_F(OverloadFlagsTest, NegativeLimitsAreErrorsNamingTheFlag) {
  absl::SetFlag(&FLAGS_max_inflight_request_bytes, -1);
  absl::StatusOr<ServerConfig> c = ConfigFromFlags();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("--max_inflight_request_bytes"));
  absl::SetFlag(&FLAGS_max_inflight_request_bytes, 0);
  absl::SetFlag(&FLAGS_max_concurrent_streams, -4);
  c = ConfigFromFlags();
  EXPECT_THAT(c.status().message(), HasSubstr("--max_concurrent_streams"));
}

}  // namespace
}  // namespace exposure_filter
