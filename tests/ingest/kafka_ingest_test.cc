// The Kafka consumer against librdkafka's mock cluster on loopback: real
// protocol, the real server in-process. Records what it consumes
// through the RecordExposure path, skips and counts bad messages, keeps its
// offsets durable with the data and resumes from them, commits to the
// consumer group only what is durable, and refuses a topic whose partition
// count differs from --partitions. Waits poll with generous deadlines;
// nothing here measures time.
#include "src/ingest/kafka_ingest.h"

#include <grpcpp/grpcpp.h>
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tools/kafka/kafka_mock_cluster.h"

namespace exposure_filter {
namespace {

using exposure::v1::Exposure;

constexpr int kPartitions = 4;
constexpr char kTopic[] = "exposures";
// Generous: sanitizer builds on a loaded machine are slow.
constexpr absl::Duration kPatience = absl::Seconds(60);

std::string FreshDir() {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "ef_kafka_test_XXXXXX")
          .string();
  return mkdtemp(tmpl.data());
}

template <typename Pred>
bool WaitFor(Pred pred) {
  const absl::Time deadline = absl::Now() + kPatience;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return pred();
}

Exposure MakeExposure(const std::string& user, uint64_t item,
                      int64_t event_ms = 0) {
  Exposure e;
  e.set_user_id(user);
  e.add_item_ids(item);
  e.set_event_time_ms(event_ms);
  return e;
}

class KafkaIngestTest : public ::testing::Test {
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
    producer_.reset(RdKafka::Producer::create(conf.get(), err));
    ASSERT_NE(producer_, nullptr) << err;
    data_dir_ = FreshDir();
  }
  void TearDown() override {
    server_.reset();
    producer_.reset();
    cluster_.reset();
    std::filesystem::remove_all(data_dir_);
  }

  // partition < 0: Kafka's murmur2 partitioner chooses.
  void Produce(const std::string& key, const std::string& value,
               int32_t partition = -1) {
    const RdKafka::ErrorCode e = producer_->produce(
        kTopic, partition < 0 ? RdKafka::Topic::PARTITION_UA : partition,
        RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(value.data()),
        value.size(), key.empty() ? nullptr : key.data(), key.size(), 0,
        nullptr);
    ASSERT_EQ(e, RdKafka::ERR_NO_ERROR) << RdKafka::err2str(e);
  }
  void ProduceExposure(const std::string& user, uint64_t item) {
    Produce(user, MakeExposure(user, item).SerializeAsString());
  }
  void Flush() { ASSERT_EQ(producer_->flush(30000), RdKafka::ERR_NO_ERROR); }

  ServerConfig Config(
      KafkaMessageFormat format = KafkaMessageFormat::kExposure) {
    ServerConfig c;
    c.listen_address = "127.0.0.1:0";
    c.shards = 4;
    c.shutdown_grace = absl::Seconds(2);
    c.durability.data_dir = data_dir_;
    c.durability.fsync = FsyncPolicy::kNever;
    c.kafka.brokers = cluster_->bootstrap_servers();
    c.kafka.topic = kTopic;
    c.kafka.group = "test-group";
    c.kafka.format = format;
    c.kafka.max_batch_wait = absl::Milliseconds(10);
    return c;
  }
  void StartServer(const ServerConfig& c) {
    server_.reset();
    auto s = ExposureFilterServer::Start(c, &clock_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    ASSERT_NE(server_->kafka_ingest(), nullptr);
    stub_ = exposure::v1::ExposureFilter::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials()));
  }
  KafkaIngestStats Stats() { return server_->kafka_ingest()->stats(); }
  // Whether FilterRecalled removes `item` for the user (it was recorded).
  bool Remembers(const std::string& user, uint64_t item,
                 const std::string& surface = "") {
    exposure::v1::FilterRecalledRequest req;
    req.set_surface(surface);
    req.set_user_id(user);
    req.add_candidate_ids(item);
    exposure::v1::FilterRecalledResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    const grpc::Status s = stub_->FilterRecalled(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.kept_ids_size() == 0;
  }
  // The group's committed offsets, read by a separate consumer.
  std::vector<int64_t> GroupOffsets() {
    std::string err;
    std::unique_ptr<RdKafka::Conf> conf(
        RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    conf->set("bootstrap.servers", cluster_->bootstrap_servers(), err);
    conf->set("group.id", "test-group", err);
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
  std::vector<int64_t> DurableOffsets() {
    std::vector<int64_t> out(kPartitions, -1);
    for (const auto& [p, next] :
         server_->durability()->consumer_offsets().next_offset) {
      out[p] = next;
    }
    return out;
  }

  SystemClock clock_;
  std::unique_ptr<KafkaMockCluster> cluster_;
  std::unique_ptr<RdKafka::Producer> producer_;
  std::string data_dir_;
  std::unique_ptr<ExposureFilterServer> server_;
  std::unique_ptr<exposure::v1::ExposureFilter::Stub> stub_;
};

TEST_F(KafkaIngestTest, RecordsEveryFormatThroughTheServer) {
  // One server per format, each reading its own topic's messages.
  for (KafkaMessageFormat format :
       {KafkaMessageFormat::kRequest, KafkaMessageFormat::kExposure,
        KafkaMessageFormat::kJson}) {
    SCOPED_TRACE(KafkaMessageFormatName(format));
    server_.reset();
    std::filesystem::remove_all(data_dir_);
    const std::string topic =
        absl::StrCat("t-", KafkaMessageFormatName(format));
    ASSERT_TRUE(cluster_->CreateTopic(topic, kPartitions).ok());
    for (int u = 0; u < 40; ++u) {
      const std::string user = absl::StrCat("user-", u);
      std::string value;
      if (format == KafkaMessageFormat::kRequest) {
        exposure::v1::RecordExposureRequest req;
        req.set_surface("homefeed");
        *req.add_exposures() = MakeExposure(user, 1000 + u);
        value = req.SerializeAsString();
      } else if (format == KafkaMessageFormat::kExposure) {
        value = MakeExposure(user, 1000 + u).SerializeAsString();
      } else {
        value = absl::StrCat(R"({"user_id":")", user, R"(","item_ids":[")",
                             1000 + u, R"("]})");
      }
      ASSERT_EQ(producer_->produce(topic, RdKafka::Topic::PARTITION_UA,
                                   RdKafka::Producer::RK_MSG_COPY, value.data(),
                                   value.size(), user.data(), user.size(), 0,
                                   nullptr),
                RdKafka::ERR_NO_ERROR);
    }
    Flush();
    ServerConfig c = Config(format);
    c.kafka.topic = topic;
    c.kafka.surface = "homefeed";
    StartServer(c);
    ASSERT_TRUE(WaitFor([&] { return Stats().exposures == 40; }))
        << Stats().exposures;
    for (int u = 0; u < 40; ++u) {
      EXPECT_TRUE(Remembers(absl::StrCat("user-", u), 1000 + u, "homefeed"));
      EXPECT_FALSE(Remembers(absl::StrCat("user-", u), 5000 + u, "homefeed"));
    }
    const KafkaIngestStats s = Stats();
    EXPECT_EQ(s.messages, 40u);
    EXPECT_EQ(s.items, 40u);
    EXPECT_EQ(std::accumulate(s.bad_messages.begin(), s.bad_messages.end(),
                              uint64_t{0}),
              0u);
  }
}

TEST_F(KafkaIngestTest, BadMessagesAreCountedByReasonAndSkipped) {
  ServerConfig c = Config();
  c.cluster = ClusterOptions{kPartitions, 2, 0};  // owns partitions 0 and 2
  const ReplicaOwnership ours(c.cluster);
  std::string foreign_user;  // a user of replica 1
  for (int i = 0; foreign_user.empty(); ++i) {
    const std::string u = absl::StrCat("f", i);
    if (!ours.OwnsUser(u)) foreign_user = u;
  }
  std::string good_user;
  for (int i = 0; good_user.empty(); ++i) {
    const std::string u = absl::StrCat("g", i);
    if (ours.OwnsUser(u)) good_user = u;
  }
  const int32_t p = ours.PartitionOfUser(good_user);  // one of ours
  const int64_t now = absl::ToUnixMillis(absl::Now());
  Produce(good_user, std::string(11, '\xff'), p);  // undecodable
  Produce(good_user, MakeExposure("", 1).SerializeAsString(), p);  // no user
  Produce(good_user, MakeExposure("other", 1).SerializeAsString(), p);
  Produce("", MakeExposure(good_user, 1).SerializeAsString(), p);  // no key
  // A producer that ignored the key: replica 1's user on our partition.
  Produce(foreign_user, MakeExposure(foreign_user, 1).SerializeAsString(), p);
  Produce(good_user,
          MakeExposure(good_user, 1, now + 86'400'000).SerializeAsString(), p);
  Produce(good_user, MakeExposure(good_user, 1, 1000).SerializeAsString(), p);
  std::string long_user;  // over --max_id_bytes (256), one of ours
  for (int i = 0; long_user.empty(); ++i) {
    const std::string u = absl::StrCat(std::string(300, 'x'), i);
    if (ours.OwnsUser(u)) long_user = u;
  }
  Produce(long_user, MakeExposure(long_user, 1).SerializeAsString(), p);
  Produce(good_user, MakeExposure(good_user, 77).SerializeAsString(), p);
  Flush();
  StartServer(c);
  ASSERT_TRUE(
      WaitFor([&] { return Stats().batches > 0 && Stats().exposures == 1; }));
  const KafkaIngestStats s = Stats();
  EXPECT_EQ(s.messages, 9u);
  auto bad = [&](BadMessageReason r) {
    return s.bad_messages[static_cast<int>(r)];
  };
  EXPECT_EQ(bad(BadMessageReason::kUndecodable), 1u);
  EXPECT_EQ(bad(BadMessageReason::kMissingUser), 1u);
  EXPECT_EQ(bad(BadMessageReason::kKeyMismatch), 2u);
  EXPECT_EQ(bad(BadMessageReason::kNotOwned), 1u);
  EXPECT_EQ(bad(BadMessageReason::kEventTime), 2u);
  EXPECT_EQ(bad(BadMessageReason::kInvalid), 1u);
  EXPECT_TRUE(Remembers(good_user, 77));
  EXPECT_FALSE(Remembers(good_user, 1));
  // The bad messages did not stall the partition: its offset is past all.
  ASSERT_TRUE(WaitFor([&] { return DurableOffsets()[p] == 9; }));
  // Only our partitions are consumed.
  EXPECT_EQ(server_->kafka_ingest()->partitions(),
            (std::vector<int32_t>{0, 2}));
}

TEST_F(KafkaIngestTest, ResumesFromDurableOffsetsAfterRestart) {
  for (int u = 0; u < 30; ++u) ProduceExposure(absl::StrCat("user-", u), u);
  Flush();
  StartServer(Config());
  ASSERT_TRUE(WaitFor([&] { return Stats().exposures == 30; }));
  const std::vector<int64_t> before = DurableOffsets();
  EXPECT_EQ(std::accumulate(before.begin(), before.end(), int64_t{0}) +
                std::count(before.begin(), before.end(), -1),
            30);
  server_->Shutdown();  // final snapshot holds the offsets
  for (int u = 30; u < 40; ++u) ProduceExposure(absl::StrCat("user-", u), u);
  Flush();
  StartServer(Config());
  EXPECT_EQ(server_->recovery().wal_records, 0u);  // from the snapshot alone
  std::vector<int64_t> recovered(kPartitions, -1);
  for (const auto& [p, next] :
       server_->recovery().consumer_offsets.next_offset) {
    recovered[p] = next;
  }
  EXPECT_EQ(recovered, before);
  ASSERT_TRUE(WaitFor([&] { return Stats().exposures == 10; }));
  // Only the new messages were read again: the old ones came from the data
  // dir, not from Kafka. Waits until every partition's durable offset is
  // its end (all 40 accounted for): a consumer that re-read old messages
  // has read them by then, on a machine of any speed (a fixed sleep let a
  // slow machine pass that bug).
  ASSERT_TRUE(WaitFor([&] {
    const std::vector<int64_t> now = DurableOffsets();
    return std::accumulate(now.begin(), now.end(), int64_t{0}) +
               std::count(now.begin(), now.end(), -1) ==
           40;
  }));
  EXPECT_EQ(Stats().messages, 10u);
  for (int u = 0; u < 40; ++u) {
    EXPECT_TRUE(Remembers(absl::StrCat("user-", u), u)) << u;
  }
}

TEST_F(KafkaIngestTest, GroupGetsOnlyDurableOffsets) {
  for (int u = 0; u < 25; ++u) ProduceExposure(absl::StrCat("user-", u), u);
  Flush();
  StartServer(Config());
  ASSERT_TRUE(WaitFor([&] { return Stats().exposures == 25; }));
  const std::vector<int64_t> durable = DurableOffsets();
  // Asynchronous commit: the group catches up with the data dir, never
  // passes it.
  ASSERT_TRUE(WaitFor([&] { return GroupOffsets() == durable; }))
      << "group offsets never matched the durable ones";
}

// A sink that refuses while `refuse` is set, like a failed write-ahead log.
class RefusingSink final : public ExposureSink {
 public:
  absl::Status Validate(const exposure::v1::RecordExposureRequest&) override {
    return absl::OkStatus();
  }
  absl::Status Record(const exposure::v1::RecordExposureRequest& b) override {
    if (refuse.load()) return absl::UnavailableError("write-ahead log: broken");
    recorded.fetch_add(b.exposures_size());
    return absl::OkStatus();
  }
  absl::Status DeleteUser(const exposure::v1::DeleteUserRequest&) override {
    return absl::OkStatus();
  }
  absl::Status TraceUser(const exposure::v1::TracedUser&, bool) override {
    return absl::OkStatus();
  }
  size_t max_exposures_per_batch() const override { return 1000; }
  size_t max_items_per_batch() const override { return 100000; }
  std::atomic<bool> refuse{true};
  std::atomic<int> recorded{0};
};

TEST_F(KafkaIngestTest, NothingIsCommittedWhileTheStoreRefuses) {
  for (int u = 0; u < 12; ++u) ProduceExposure(absl::StrCat("user-", u), u);
  Flush();
  // The consumer alone, over a real store and data dir, with the sink
  // standing in for RecordExposure.
  auto surfaces = SurfaceRegistry::Create(FilterPolicyOptions{}, {}, 8);
  ASSERT_TRUE(surfaces.ok());
  ShardedFilterStore store(4, &clock_, surfaces->get());
  DurabilityOptions o;
  o.data_dir = data_dir_;
  o.fsync = FsyncPolicy::kNever;
  o.snapshot_interval = absl::ZeroDuration();
  o.snapshot_wal_bytes = 0;
  auto durability = StoreDurability::Open(o, surfaces->get(), &store);
  ASSERT_TRUE(durability.ok()) << durability.status();
  ASSERT_TRUE((*durability)->Recover().ok());
  RefusingSink sink;
  auto ingest =
      KafkaIngest::Start(Config().kafka, nullptr, &sink, durability->get());
  ASSERT_TRUE(ingest.ok()) << ingest.status();
  ASSERT_TRUE(WaitFor([&] { return (*ingest)->stats().record_errors >= 2; }));
  EXPECT_TRUE((*durability)->consumer_offsets().next_offset.empty());
  EXPECT_EQ(GroupOffsets(), std::vector<int64_t>(kPartitions, -1));
  EXPECT_EQ((*ingest)->stats().batches, 0u);

  sink.refuse = false;  // the log works again: the same batch goes through
  ASSERT_TRUE(WaitFor([&] { return sink.recorded.load() == 12; }));
  std::vector<int64_t> durable(kPartitions, -1);
  ASSERT_TRUE(WaitFor([&] {
    int64_t sum = 0;
    for (const auto& [p, next] :
         (*durability)->consumer_offsets().next_offset) {
      durable[p] = next;
      sum += next;
    }
    return sum == 12;
  }));
  ASSERT_TRUE(WaitFor([&] { return GroupOffsets() == durable; }));
  (*ingest)->Stop();
  ASSERT_TRUE((*durability)->Close(/*final_snapshot=*/false).ok());
}

TEST_F(KafkaIngestTest, RefusesATopicWithAnotherPartitionCount) {
  ServerConfig c = Config();
  c.cluster = ClusterOptions{kPartitions * 2, 2, 0};
  auto s = ExposureFilterServer::Start(c, &clock_);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("--partitions=8"), std::string::npos)
      << s.status();
}

}  // namespace
}  // namespace exposure_filter
