// Replication factor 2 (issue 16, milestone 1: placement) against
// librdkafka's mock cluster, real servers in-process: with P = 6, N = 3,
// R = 2 each replica consumes the 4 partitions it is one of the 2 owners of,
// every exposure produced to the topic is applied by both owners of its
// user, each replica commits its progress to a consumer group of its own
// (the copies advance independently), and a direct RecordExposure or
// DeleteUser, which would reach one copy only, is refused. Waits poll with
// generous deadlines; nothing here measures time.
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
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tools/kafka/kafka_mock_cluster.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int32_t kPartitions = 6;
constexpr int32_t kReplicas = 3;
constexpr int32_t kReplication = 2;
constexpr char kTopic[] = "exposures";
constexpr char kGroup[] = "ha-group";
constexpr int kUsers = 60;
// Generous: sanitizer builds on a loaded machine are slow.
constexpr absl::Duration kPatience = absl::Seconds(60);

template <typename Pred>
bool WaitFor(Pred pred) {
  const absl::Time deadline = absl::Now() + kPatience;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return pred();
}

std::string User(int u) { return absl::StrCat("user-", u); }
uint64_t ItemOf(int u) { return 1000 + static_cast<uint64_t>(u); }

class ReplicatedIngestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = KafkaMockCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    ASSERT_TRUE(cluster_->CreateTopic(kTopic, kPartitions).ok());
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
  void TearDown() override {
    for (auto& s : servers_) s.reset();
    cluster_.reset();
    for (const std::string& d : dirs_) std::filesystem::remove_all(d);
  }

  ServerConfig Config(int32_t ordinal) {
    ServerConfig c;
    c.listen_address = "127.0.0.1:0";
    c.shards = 4;
    c.shutdown_grace = absl::Seconds(2);
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "ef_ha_test_XXXXXX").string();
    dirs_.push_back(mkdtemp(tmpl.data()));
    c.durability.data_dir = dirs_.back();
    c.durability.fsync = FsyncPolicy::kNever;
    c.cluster.partitions = kPartitions;
    c.cluster.replicas = kReplicas;
    c.cluster.replica_ordinal = ordinal;
    c.cluster.replication_factor = kReplication;
    c.kafka.brokers = cluster_->bootstrap_servers();
    c.kafka.topic = kTopic;
    c.kafka.group = kGroup;
    c.kafka.format = KafkaMessageFormat::kExposure;
    c.kafka.max_batch_wait = absl::Milliseconds(10);
    return c;
  }
  void StartAll() {
    for (int32_t r = 0; r < kReplicas; ++r) {
      auto s = ExposureFilterServer::Start(Config(r), &clock_);
      ASSERT_TRUE(s.ok()) << s.status();
      servers_.push_back(*std::move(s));
      stubs_.push_back(
          exposure::v1::ExposureFilter::NewStub(grpc::CreateChannel(
              absl::StrCat("127.0.0.1:", servers_.back()->port()),
              grpc::InsecureChannelCredentials())));
    }
  }
  // FilterRecalled of the user's item on replica r: its status, and in
  // *removed whether the item was filtered (the copy holds the exposure).
  grpc::Status Recall(int32_t r, int u, bool* removed) {
    exposure::v1::FilterRecalledRequest req;
    req.set_user_id(User(u));
    req.add_candidate_ids(ItemOf(u));
    exposure::v1::FilterRecalledResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    const grpc::Status s = stubs_[r]->FilterRecalled(&ctx, req, &resp);
    *removed = s.ok() && resp.kept_ids_size() == 0;
    return s;
  }
  // Committed offsets of `group`, -1 where none.
  std::vector<int64_t> GroupOffsets(const std::string& group) {
    std::string err;
    std::unique_ptr<RdKafka::Conf> conf(
        RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    conf->set("bootstrap.servers", cluster_->bootstrap_servers(), err);
    conf->set("group.id", group, err);
    std::unique_ptr<RdKafka::KafkaConsumer> c(
        RdKafka::KafkaConsumer::create(conf.get(), err));
    std::vector<RdKafka::TopicPartition*> tps;
    for (int p = 0; p < kPartitions; ++p) {
      tps.push_back(RdKafka::TopicPartition::create(kTopic, p));
    }
    std::vector<int64_t> out(kPartitions, -1);
    if (c->committed(tps, 10000) == RdKafka::ERR_NO_ERROR) {
      for (RdKafka::TopicPartition* tp : tps) {
        out[tp->partition()] = tp->offset() >= 0 ? tp->offset() : -1;
      }
    }
    for (RdKafka::TopicPartition* tp : tps) delete tp;
    c->close();
    return out;
  }

  SystemClock clock_;
  std::unique_ptr<KafkaMockCluster> cluster_;
  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<ExposureFilterServer>> servers_;
  std::vector<std::unique_ptr<exposure::v1::ExposureFilter::Stub>> stubs_;
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

TEST_F(ReplicatedIngestTest, DirectWritesAreRefusedNamingTheFlag) {
  StartAll();
  const std::vector<int32_t> owners =
      OwnersOfUser(User(0), kPartitions, kReplicas, kReplication);
  {
    exposure::v1::RecordExposureRequest req;
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(User(0));
    e->add_item_ids(424242);
    exposure::v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = stubs_[owners[0]]->RecordExposure(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(),
                HasSubstr("RecordExposure: --replication_factor=2"));
  }
  {
    exposure::v1::DeleteUserRequest req;
    req.set_user_id(User(0));
    exposure::v1::DeleteUserResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = stubs_[owners[1]]->DeleteUser(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(),
                HasSubstr("DeleteUser: --replication_factor=2"));
  }
  // Neither reached the copy: the refused item is not filtered, the logged
  // one still is.
  for (int32_t r : owners) {
    exposure::v1::FilterRecalledRequest req;
    req.set_user_id(User(0));
    req.add_candidate_ids(424242);
    req.add_candidate_ids(ItemOf(0));
    ASSERT_TRUE(WaitFor([&] {
      exposure::v1::FilterRecalledResponse resp;
      grpc::ClientContext ctx;
      return stubs_[r]->FilterRecalled(&ctx, req, &resp).ok() &&
             resp.kept_ids_size() == 1 && resp.kept_ids(0) == 424242;
    })) << "owner "
        << r;
  }
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
