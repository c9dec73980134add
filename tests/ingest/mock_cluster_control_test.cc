// kafka-mock-cluster's control commands (tools/kafka/mock_cluster_control.h)
// against an in-process mock cluster: what a drill sends is applied, and
// what it mistypes is refused with a reason instead of being ignored. The
// delayed fetches themselves are what the failover drill's e2e test
// measures (both owners' lag past the bound).
#include "tools/kafka/mock_cluster_control.h"

#include <librdkafka/rdkafkacpp.h>

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/kafka/kafka_mock_cluster.h"

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kTopic[] = "exposures";

class MockClusterControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = KafkaMockCluster::Start(/*brokers=*/2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    ASSERT_TRUE(cluster_->CreateTopic(kTopic, 4).ok());
  }

  // The partition's leader as a client's Metadata request sees it.
  int32_t LeaderOf(int32_t partition) {
    std::string err;
    std::unique_ptr<RdKafka::Conf> conf(
        RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    conf->set("bootstrap.servers", cluster_->bootstrap_servers(), err);
    std::unique_ptr<RdKafka::Producer> client(
        RdKafka::Producer::create(conf.get(), err));
    if (client == nullptr) return -2;
    std::unique_ptr<RdKafka::Topic> topic(
        RdKafka::Topic::create(client.get(), kTopic, nullptr, err));
    RdKafka::Metadata* raw = nullptr;
    if (client->metadata(false, topic.get(), &raw, 10000) !=
        RdKafka::ERR_NO_ERROR) {
      return -2;
    }
    std::unique_ptr<RdKafka::Metadata> metadata(raw);
    for (const RdKafka::TopicMetadata* t : *metadata->topics()) {
      for (const RdKafka::PartitionMetadata* p : *t->partitions()) {
        if (p->id() == partition) return p->leader();
      }
    }
    return -2;
  }

  std::string Run(const std::string& line) {
    return RunMockClusterCommand(*cluster_, line);
  }

  std::unique_ptr<KafkaMockCluster> cluster_;
};

TEST_F(MockClusterControlTest, LeaderMovesThePartition) {
  ASSERT_EQ(Run("leader exposures 1 1"), "ok");
  EXPECT_EQ(LeaderOf(1), 1);
  ASSERT_EQ(Run("leader exposures 1 2"), "ok");
  EXPECT_EQ(LeaderOf(1), 2);
}

TEST_F(MockClusterControlTest, LeaderOnAnUnknownBrokerIsRefused) {
  ASSERT_EQ(Run("leader exposures 1 1"), "ok");
  EXPECT_THAT(Run("leader exposures 1 3"), StartsWith("error: "));
  EXPECT_EQ(LeaderOf(1), 1);
}

TEST_F(MockClusterControlTest, DelayOnAKnownBrokerIsAccepted) {
  EXPECT_EQ(Run("delay 2 1 2 5000"), "ok");
}

TEST_F(MockClusterControlTest, DelayOnAnUnknownBrokerIsRefused) {
  EXPECT_THAT(Run("delay 3 1 2 5000"), StartsWith("error: "));
}

TEST_F(MockClusterControlTest, MalformedCommandsSayWhatIsWrong) {
  EXPECT_THAT(Run(""), HasSubstr("empty command"));
  EXPECT_THAT(Run("stall 2"), HasSubstr("unknown command \"stall\""));
  EXPECT_THAT(Run("leader exposures 1"), HasSubstr("usage: leader"));
  EXPECT_THAT(Run("delay 2 1 2"), HasSubstr("usage: delay"));
  EXPECT_THAT(Run("delay 2 fetch 2 5000"), HasSubstr("not an integer: fetch"));
  EXPECT_THAT(Run("delay 2 1 -1 5000"), HasSubstr(">= 0"));
}

}  // namespace
}  // namespace exposure_filter
