// Flags and their EXPOSURE_FILTER_* environment overrides. Flags and the
// environment are process-global: every test restores both.
#include "src/server/config/server_flags.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(int, shards);
ABSL_DECLARE_FLAG(std::string, surfaces);
ABSL_DECLARE_FLAG(absl::Duration, retention);
ABSL_DECLARE_FLAG(int, max_id_bytes);
ABSL_DECLARE_FLAG(absl::Duration, sweep_interval);
ABSL_DECLARE_FLAG(int32_t, partitions);
ABSL_DECLARE_FLAG(int32_t, replicas);
ABSL_DECLARE_FLAG(int32_t, replica_ordinal);
ABSL_DECLARE_FLAG(int32_t, replication_factor);
ABSL_DECLARE_FLAG(std::string, kafka_brokers);
ABSL_DECLARE_FLAG(absl::Duration, max_serving_lag);
ABSL_DECLARE_FLAG(absl::Duration, kafka_produce_timeout);

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;

constexpr const char* kVariables[] = {
    "EXPOSURE_FILTER_SHARDS",         "EXPOSURE_FILTER_RETENTION",
    "EXPOSURE_FILTER_SURFACES",       "EXPOSURE_FILTER_LISTEN",
    "EXPOSURE_FILTER_MAX_ID_BYTES",   "EXPOSURE_FILTER_REPLICATION_FACTOR",
    "EXPOSURE_FILTER_MAX_SERVING_LAG"};

class ServerFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* var : kVariables) unsetenv(var);
  }
  void TearDown() override {
    for (const char* var : kVariables) unsetenv(var);
    // Back to the built-in defaults for whatever runs next in this process.
    absl::SetFlag(&FLAGS_shards, 64);
    absl::SetFlag(&FLAGS_surfaces, "");
    absl::SetFlag(&FLAGS_retention, absl::Hours(24 * 30));
    absl::SetFlag(&FLAGS_max_id_bytes, 256);
    absl::SetFlag(&FLAGS_sweep_interval, absl::Minutes(1));
  }
  // Restores every other flag (e.g. --listen set from the environment).
  absl::FlagSaver saver_;
};

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST_F(ServerFlagsTest, DefaultsWithoutEnvironment) {
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  absl::StatusOr<ServerConfig> config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->shards, 64);
  EXPECT_EQ(config->listen_address, "localhost:50051");
  EXPECT_EQ(config->default_policy.retention, absl::Hours(24 * 30));
  EXPECT_TRUE(config->surface_overrides.empty());
  EXPECT_EQ(config->limits.max_id_bytes, 256u);
}

TEST_F(ServerFlagsTest, EnvironmentSetsShards) {
  setenv("EXPOSURE_FILTER_SHARDS", "16", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  absl::StatusOr<ServerConfig> config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->shards, 16);
}

TEST_F(ServerFlagsTest, EnvironmentSetsDurationsStringsAndSurfaces) {
  setenv("EXPOSURE_FILTER_LISTEN", "0.0.0.0:6000", 1);
  setenv("EXPOSURE_FILTER_RETENTION", "168h", 1);
  setenv("EXPOSURE_FILTER_SURFACES", "video:fp_rate=0.001", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  absl::StatusOr<ServerConfig> config = ConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen_address, "0.0.0.0:6000");
  EXPECT_EQ(config->default_policy.retention, absl::Hours(168));
  ASSERT_EQ(config->surface_overrides.size(), 1u);
  EXPECT_EQ(config->surface_overrides[0].first, "video");
  EXPECT_EQ(config->surface_overrides[0].second.fp_rate, 0.001);
  // An override inherits the (environment-set) defaults it does not name.
  EXPECT_EQ(config->surface_overrides[0].second.retention, absl::Hours(168));
}

TEST_F(ServerFlagsTest, BadEnvironmentValueNamesTheVariable) {
  setenv("EXPOSURE_FILTER_SHARDS", "sixteen", 1);
  const absl::Status s = ApplyEnvironmentOverrides();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("EXPOSURE_FILTER_SHARDS"));
  EXPECT_THAT(Message(s), HasSubstr("sixteen"));
  EXPECT_EQ(absl::GetFlag(FLAGS_shards), 64);
}

TEST_F(ServerFlagsTest, BadSurfacesFlagIsAnError) {
  absl::SetFlag(&FLAGS_surfaces, "video:fp_rate=lots");
  absl::StatusOr<ServerConfig> config = ConfigFromFlags();
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(config.status()), HasSubstr("fp_rate=lots"));
}

TEST_F(ServerFlagsTest, BadSurfacesFromEnvironmentIsAnError) {
  setenv("EXPOSURE_FILTER_SURFACES", "video:colour=blue", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  EXPECT_EQ(ConfigFromFlags().status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ServerFlagsTest, NonPositiveLimitsAreErrors) {
  absl::SetFlag(&FLAGS_max_id_bytes, 0);
  absl::StatusOr<ServerConfig> config = ConfigFromFlags();
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(config.status()), HasSubstr("--max_id_bytes"));

  absl::SetFlag(&FLAGS_max_id_bytes, 256);
  absl::SetFlag(&FLAGS_sweep_interval, absl::ZeroDuration());
  EXPECT_THAT(Message(ConfigFromFlags().status()),
              HasSubstr("--sweep_interval"));
}

// --replication_factor, default 1 (no copies), from the
// environment like every cluster flag, validated naming the flags.
TEST_F(ServerFlagsTest, ReplicationFactorIsValidatedNamingTheFlags) {
  {
    absl::StatusOr<ServerConfig> config = ConfigFromFlags();
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->cluster.replication_factor, 1);
  }
  absl::SetFlag(&FLAGS_partitions, 12);
  absl::SetFlag(&FLAGS_replicas, 3);
  absl::SetFlag(&FLAGS_replica_ordinal, 1);
  setenv("EXPOSURE_FILTER_REPLICATION_FACTOR", "2", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  // R = 2 without Kafka: the copies would have no log to stay equal by.
  EXPECT_THAT(Message(ConfigFromFlags().status()),
              HasSubstr("--replication_factor=2 needs Kafka ingest "
                        "(--kafka_brokers)"));
  absl::SetFlag(&FLAGS_kafka_brokers, "127.0.0.1:9092");
  {
    absl::StatusOr<ServerConfig> config = ConfigFromFlags();
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->cluster.replication_factor, 2);
    EXPECT_THAT(config->Summary(), HasSubstr("replication_factor=2"));
  }
  absl::SetFlag(&FLAGS_replication_factor, 4);
  EXPECT_THAT(Message(ConfigFromFlags().status()),
              HasSubstr("--replication_factor=4 exceeds --replicas=3"));
  absl::SetFlag(&FLAGS_replication_factor, 0);
  EXPECT_THAT(Message(ConfigFromFlags().status()),
              HasSubstr("--replication_factor must be >= 1"));
}

// --kafka_produce_timeout is the per-message produce deadline
// (message.timeout.ms): refused outside librdkafka's range, naming the flag.
TEST_F(ServerFlagsTest, KafkaProduceTimeoutIsValidatedNamingTheFlag) {
  absl::SetFlag(&FLAGS_kafka_brokers, "127.0.0.1:9092");
  absl::SetFlag(&FLAGS_kafka_produce_timeout, absl::Milliseconds(500));
  {
    absl::StatusOr<ServerConfig> config = ConfigFromFlags();
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->kafka.produce_timeout, absl::Milliseconds(500));
  }
  absl::SetFlag(&FLAGS_kafka_produce_timeout, absl::ZeroDuration());
  EXPECT_THAT(Message(ConfigFromFlags().status()),
              HasSubstr("--kafka_produce_timeout: 0 is outside 1ms to "
                        "2147483647ms"));
  absl::SetFlag(&FLAGS_kafka_produce_timeout, absl::Hours(24 * 30));
  EXPECT_THAT(Message(ConfigFromFlags().status()),
              HasSubstr("--kafka_produce_timeout: 720h is outside 1ms to "
                        "2147483647ms"));
}

// --max_serving_lag, default 1s, 0 turns the gate off, from
// the environment like the rest; negative is refused naming the flag.
TEST_F(ServerFlagsTest, MaxServingLagIsValidatedNamingTheFlag) {
  {
    absl::StatusOr<ServerConfig> config = ConfigFromFlags();
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->max_serving_lag, absl::Seconds(1));
  }
  setenv("EXPOSURE_FILTER_MAX_SERVING_LAG", "250ms", 1);
  ASSERT_TRUE(ApplyEnvironmentOverrides().ok());
  {
    absl::StatusOr<ServerConfig> config = ConfigFromFlags();
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->max_serving_lag, absl::Milliseconds(250));
  }
  absl::SetFlag(&FLAGS_max_serving_lag, absl::ZeroDuration());
  EXPECT_TRUE(ConfigFromFlags().ok());
  absl::SetFlag(&FLAGS_max_serving_lag, absl::Seconds(-2));
  EXPECT_THAT(Message(ConfigFromFlags().status()),
              HasSubstr("--max_serving_lag=-2s: must be a finite duration "
                        ">= 0"));
}

}  // namespace
}  // namespace exposure_filter
