// Operations flags: admin port, memory ceiling, shutdown delay,
// keepalive. Flags and the environment are process-global: every test
// restores both.
#include <cstdlib>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/config/server_flags.h"

ABSL_DECLARE_FLAG(std::string, admin_listen);
ABSL_DECLARE_FLAG(int64_t, memory_limit_bytes);
ABSL_DECLARE_FLAG(absl::Duration, shutdown_delay);
ABSL_DECLARE_FLAG(absl::Duration, shutdown_grace);
ABSL_DECLARE_FLAG(absl::Duration, keepalive_time);
ABSL_DECLARE_FLAG(int, keepalive_max_ping_strikes);

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;

class OperationsFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override { Reset(); }
  void TearDown() override { Reset(); }
  static void Reset() {
    unsetenv("EXPOSURE_FILTER_MEMORY_LIMIT_BYTES");
    unsetenv("EXPOSURE_FILTER_ADMIN_LISTEN");
    unsetenv("EXPOSURE_FILTER_SHUTDOWN_DELAY");
    absl::SetFlag(&FLAGS_admin_listen, "127.0.0.1:9464");
    absl::SetFlag(&FLAGS_memory_limit_bytes, 0);
    absl::SetFlag(&FLAGS_shutdown_delay, absl::ZeroDuration());
    absl::SetFlag(&FLAGS_shutdown_grace, absl::Seconds(10));
    absl::SetFlag(&FLAGS_keepalive_time, absl::Minutes(1));
    absl::SetFlag(&FLAGS_keepalive_max_ping_strikes, 2);
  }
};

TEST_F(OperationsFlagsTest, Defaults) {
  absl::StatusOr<ServerConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin_listen_address, "127.0.0.1:9464");
  EXPECT_EQ(c->memory_limit_bytes, 0u);
  EXPECT_EQ(c->shutdown_delay, absl::ZeroDuration());
  EXPECT_EQ(c->keepalive.time, absl::Minutes(1));
  EXPECT_EQ(c->keepalive.min_client_ping_interval, absl::Seconds(10));
  EXPECT_TRUE(c->keepalive.permit_without_calls);
  EXPECT_EQ(c->keepalive.max_connection_age, absl::InfiniteDuration());
  EXPECT_THAT(c->Summary(), HasSubstr("admin_listen=127.0.0.1:9464"));
}

TEST_F(OperationsFlagsTest, EnvironmentSetsCeilingAndDisablesAdmin) {
  setenv("EXPOSURE_FILTER_MEMORY_LIMIT_BYTES", "1073741824", 1);
  setenv("EXPOSURE_FILTER_ADMIN_LISTEN", "", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  absl::StatusOr<ServerConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->memory_limit_bytes, uint64_t{1} << 30);
  EXPECT_EQ(c->admin_listen_address, "");
  EXPECT_THAT(c->Summary(), HasSubstr("admin_listen=off"));
}

TEST_F(OperationsFlagsTest, NegativeValuesAreErrors) {
  absl::SetFlag(&FLAGS_memory_limit_bytes, -1);
  EXPECT_THAT(std::string(ConfigFromFlags().status().message()),
              HasSubstr("--memory_limit_bytes"));
  Reset();
  absl::SetFlag(&FLAGS_shutdown_delay, absl::Seconds(-1));
  EXPECT_THAT(std::string(ConfigFromFlags().status().message()),
              HasSubstr("--shutdown_delay"));
  Reset();
  absl::SetFlag(&FLAGS_keepalive_time, absl::Seconds(-5));
  EXPECT_THAT(std::string(ConfigFromFlags().status().message()),
              HasSubstr("--keepalive_time"));
  Reset();
  absl::SetFlag(&FLAGS_keepalive_max_ping_strikes, -1);
  EXPECT_THAT(std::string(ConfigFromFlags().status().message()),
              HasSubstr("--keepalive_max_ping_strikes"));
}

TEST_F(OperationsFlagsTest, EnvironmentSetsTheDrain) {
  setenv("EXPOSURE_FILTER_SHUTDOWN_DELAY", "5s", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  absl::StatusOr<ServerConfig> c = ConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->shutdown_delay, absl::Seconds(5));
  EXPECT_THAT(c->Summary(), HasSubstr("shutdown_delay=5s"));
}

// A phase that is never over would only end by SIGKILL, without the final
// snapshot.
TEST_F(OperationsFlagsTest, ShutdownPhasesMustEnd) {
  absl::SetFlag(&FLAGS_shutdown_delay, absl::InfiniteDuration());
  EXPECT_THAT(std::string(ConfigFromFlags().status().message()),
              HasSubstr("--shutdown_delay must be below 1h"));
  Reset();
  absl::SetFlag(&FLAGS_shutdown_grace, absl::InfiniteDuration());
  EXPECT_THAT(std::string(ConfigFromFlags().status().message()),
              HasSubstr("--shutdown_grace must be below 1h"));
  Reset();
  absl::SetFlag(&FLAGS_shutdown_grace, absl::Seconds(-1));
  EXPECT_THAT(std::string(ConfigFromFlags().status().message()),
              HasSubstr("--shutdown_grace must not be negative"));
}

}  // namespace
}  // namespace exposure_filter
