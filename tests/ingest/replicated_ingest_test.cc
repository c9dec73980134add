// Replication factor 2, placement: against librdkafka's mock cluster, real
// servers in-process: with P = 6, N = 3,
// R = 2 each replica consumes the 4 partitions it is one of the 2 owners of,
// every exposure produced to the topic is applied by both owners of its
// user, each replica commits its progress to a consumer group of its own
// (the copies advance independently). Writes through the RPCs are
// replicated_writes_test.cc. Waits poll with generous deadlines; nothing
// here measures time.
#include <grpcpp/grpcpp.h>
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/partitioning.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ingest/kafka_ingest.h"
#include "tests/ingest/replicated_cluster_test_base.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int kUsers = 60;

std::string User(int u) { return absl::StrCat("user-", u); }
uint64_t ItemOf(int u) { return 1000 + static_cast<uint64_t>(u); }

// The shared cluster, with one exposure of each user produced to the topic
// by an outside producer (a logger) before the servers start.
class ReplicatedIngestTest : public ReplicatedClusterTest {
 protected:
  void SetUp() override {
    ReplicatedClusterTest::SetUp();
    if (HasFatalFailure()) return;
    std::string err;
    std::unique_ptr<RdKafka::Conf> conf(
        RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    conf->set("bootstrap.servers", cluster_->bootstrap_servers(), err);
    conf->set("partitioner", "murmur2_random", err);
    std::unique_ptr<RdKafka::Producer> producer(
        RdKafka::Producer::create(conf.get(), err));
    ASSERT_NE(producer, nullptr) << err;
    for (int u = 0; u < kUsers; ++u) {
      exposure::v1::Exposure e;
      e.set_user_id(User(u));
      e.add_item_ids(ItemOf(u));
      const std::string key = User(u), value = e.SerializeAsString();
      ASSERT_EQ(producer->produce(kTopic, RdKafka::Topic::PARTITION_UA,
                                  RdKafka::Producer::RK_MSG_COPY,
                                  const_cast<char*>(value.data()), value.size(),
                                  key.data(), key.size(), 0, nullptr),
                RdKafka::ERR_NO_ERROR);
    }
    ASSERT_EQ(producer->flush(30000), RdKafka::ERR_NO_ERROR);
  }
  grpc::Status Recall(int32_t r, int u, bool* removed) {
    return ReplicatedClusterTest::Recall(r, User(u), ItemOf(u), removed);
  }
};

TEST_F(ReplicatedIngestTest, EachReplicaConsumesThePartitionsItIsAnOwnerOf) {
  StartAll();
  // (r - p) mod 3 < 2, by hand: replica 0 owns 0, 2, 3, 5 (owner 0 of 0 and
  // 3, owner 1 of 2 and 5); replica 1 owns 0, 1, 3, 4; replica 2 owns
  // 1, 2, 4, 5.
  const std::vector<std::vector<int32_t>> want = {
      {0, 2, 3, 5}, {0, 1, 3, 4}, {1, 2, 4, 5}};
  for (int32_t r = 0; r < kReplicas; ++r) {
    ASSERT_NE(servers_[r]->kafka_ingest(), nullptr);
    EXPECT_THAT(servers_[r]->kafka_ingest()->partitions(),
                ElementsAreArray(want[r]))
        << "replica " << r;
  }
}

TEST_F(ReplicatedIngestTest, EveryOwnerAppliesTheLogAndOthersRefuse) {
  StartAll();
  // Each replica records exactly the users it is one of the 2 owners of
  // (2/3 of them), once: one wait, then every user checked on every replica.
  std::vector<uint64_t> owned(kReplicas, 0);
  for (int u = 0; u < kUsers; ++u) {
    for (int32_t r :
         OwnersOfUser(User(u), kPartitions, kReplicas, kReplication)) {
      ++owned[r];
    }
  }
  for (int32_t r = 0; r < kReplicas; ++r) {
    ASSERT_TRUE(WaitFor([&] {
      return servers_[r]->kafka_ingest()->stats().exposures == owned[r];
    })) << "replica "
        << r << " recorded " << servers_[r]->kafka_ingest()->stats().exposures
        << " of " << owned[r];
  }
  for (int u = 0; u < kUsers; ++u) {
    const std::vector<int32_t> owners =
        OwnersOfUser(User(u), kPartitions, kReplicas, kReplication);
    for (int32_t r = 0; r < kReplicas; ++r) {
      bool removed = false;
      const grpc::Status s = Recall(r, u, &removed);
      if (r == owners[0] || r == owners[1]) {
        // Both copies converged on the log.
        EXPECT_TRUE(s.ok() && removed) << User(u) << " not applied on owner "
                                       << r << ": " << s.error_message();
      } else {
        EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
            << User(u) << " on replica " << r;
        EXPECT_THAT(s.error_message(),
                    HasSubstr(absl::StrCat("owned by replicas ", owners[0],
                                           ", ", owners[1])));
      }
    }
  }
}

TEST_F(ReplicatedIngestTest, EachReplicaCommitsToItsOwnGroup) {
  StartAll();
  for (int32_t r = 0; r < kReplicas; ++r) {
    EXPECT_EQ(ConsumerGroupOf(Config(r).kafka, nullptr), kGroup);
    const std::string group = absl::StrCat(kGroup, "-", r);
    const std::vector<int32_t> owned =
        PartitionsOfReplica(r, kPartitions, kReplicas, kReplication);
    // Every owned partition reaches its end offset in this replica's group,
    // and partitions it does not own are never committed there.
    ASSERT_TRUE(WaitFor([&] {
      const std::vector<int64_t> got = GroupOffsets(group);
      const KafkaIngestStats st = servers_[r]->kafka_ingest()->stats();
      for (int32_t p = 0; p < kPartitions; ++p) {
        const bool mine =
            std::find(owned.begin(), owned.end(), p) != owned.end();
        if (!mine && got[p] != -1) return false;
        if (mine) {
          for (const KafkaPartitionState& s : st.partitions) {
            if (s.partition == p &&
                (s.high_watermark < 0 || got[p] != s.high_watermark)) {
              return false;
            }
          }
        }
      }
      return true;
    })) << "replica "
        << r << "'s group " << group;
  }
  // Nothing was committed under the shared name.
  EXPECT_EQ(GroupOffsets(kGroup), std::vector<int64_t>(kPartitions, -1));
}

TEST_F(ReplicatedIngestTest, StatsShowTheReplicationFactor) {
  StartAll();
  exposure::v1::GetServerStatsResponse stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stubs_[2]->GetServerStats(&ctx, {}, &stats).ok());
  EXPECT_EQ(stats.replication_factor(), 2u);
  EXPECT_THAT(stats.owned_partitions(), ElementsAreArray({1, 2, 4, 5}));
}

TEST(ReplicatedServerTest, ReplicationWithoutKafkaIsAStartupError) {
  SystemClock clock;
  ServerConfig c;
  c.listen_address = "127.0.0.1:0";
  c.cluster.partitions = kPartitions;
  c.cluster.replicas = kReplicas;
  c.cluster.replication_factor = kReplication;
  auto server = ExposureFilterServer::Start(c, &clock);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("--replication_factor=2 needs Kafka ingest "
                        "(--kafka_brokers)"));
}

}  // namespace
}  // namespace exposure_filter
