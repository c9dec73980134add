#include "tests/ingest/replicated_cluster_test_base.h"

#include <librdkafka/rdkafkacpp.h>
#include <stdlib.h>

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace exposure_filter {

void ReplicatedClusterTest::SetUp() {
  auto cluster = KafkaMockCluster::Start(brokers_);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = *std::move(cluster);
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, kPartitions).ok());
}

void ReplicatedClusterTest::TearDown() {
  for (auto& s : servers_) s.reset();
  cluster_.reset();
  for (const std::string& d : dirs_) std::filesystem::remove_all(d);
}

ServerConfig ReplicatedClusterTest::Config(int32_t ordinal) {
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

void ReplicatedClusterTest::StartAll() {
  for (int32_t r = 0; r < kReplicas; ++r) {
    ServerConfig c = Config(r);
    if (edit_config_) edit_config_(&c);
    auto s = ExposureFilterServer::Start(c, &clock_);
    ASSERT_TRUE(s.ok()) << s.status();
    servers_.push_back(*std::move(s));
    stubs_.push_back(exposure::v1::ExposureFilter::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", servers_.back()->port()),
                            grpc::InsecureChannelCredentials())));
  }
  // Replicated servers serve reads only once caught up with the log (the
  // lag gate): a test's first read must not race that.
  for (int32_t r = 0; r < kReplicas; ++r) {
    ASSERT_TRUE(WaitFor([&] { return servers_[r]->readiness().serving(); }))
        << "replica " << r << " never caught up";
  }
}

grpc::Status ReplicatedClusterTest::Recall(int32_t r, const std::string& user,
                                           uint64_t item, bool* removed) {
  exposure::v1::FilterRecalledRequest req;
  req.set_user_id(user);
  req.add_candidate_ids(item);
  exposure::v1::FilterRecalledResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::Status s = stubs_[r]->FilterRecalled(&ctx, req, &resp);
  *removed = s.ok() && resp.kept_ids_size() == 0;
  return s;
}

std::vector<int64_t> ReplicatedClusterTest::GroupOffsets(
    const std::string& group) {
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

}  // namespace exposure_filter
