// Least-stale reads against librdkafka's mock cluster, three real servers
// in-process (P = 6, N = 3, R = 2): a copy lagging past --max_serving_lag
// (its disk refuses the writes, so its consumer stalls) refuses a read
// without allow_lagging and answers one with it, saying how stale it is; a
// replaying copy refuses even with it; min_offsets still hold; the routing
// client's last try sets it, so a read succeeds while both owners lag; the
// copy counts such answers in its metrics. Waits poll with generous
// deadlines; nothing measures time.
#include <grpcpp/grpcpp.h>
#include <prometheus/metric_family.h>

#include <cerrno>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/partitioning.h"
#include "exposure_filter/routing_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ingest/replicated_cluster_routing.h"
#include "tests/ingest/replicated_cluster_test_base.h"
#include "tests/persist/faulty_disk_io.h"

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;
using testing_util::FaultyDiskIo;

// The user's two owners; each may be made to lag through its own disk.
constexpr int32_t kGood = 0;
constexpr int32_t kSlow = 1;

// The first user "l-<i>" whose owners are exactly {kGood, kSlow}.
std::string UserOfBoth() { return UserOwnedBy("l-", kGood, kSlow); }

class LaggingReadsTest : public ReplicatedClusterTest {
 protected:
  // Starts the three replicas with --max_serving_lag=1s; kGood's and
  // kSlow's data_dirs write through disks_[kGood] and disks_[kSlow].
  void Start() {
    edit_config_ = [this](ServerConfig* c) {
      c->max_serving_lag = absl::Seconds(1);
      const int32_t r = c->cluster.replica_ordinal;
      if (r == kGood || r == kSlow) c->durability.disk_io = &disks_[r];
      configs_[r] = *c;
    };
    StartAll();
    user_ = UserOfBoth();
    partition_ = KafkaPartitionForKey(user_, kPartitions);
  }

  void TearDown() override {
    for (FaultyDiskIo& d : disks_) d.Heal();
    ReplicatedClusterTest::TearDown();
  }

  grpc::Status Record(int32_t r, uint64_t item,
                      exposure::v1::RecordExposureResponse* resp = nullptr) {
    exposure::v1::RecordExposureRequest req;
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user_);
    e->add_item_ids(item);
    exposure::v1::RecordExposureResponse ignored;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    return stubs_[r]->RecordExposure(&ctx, req, resp ? resp : &ignored);
  }

  grpc::Status RecallOn(int32_t r, bool allow_lagging,
                        exposure::v1::FilterRecalledResponse* resp,
                        const std::map<int32_t, int64_t>& min_offsets = {}) {
    exposure::v1::FilterRecalledRequest req;
    req.set_user_id(user_);
    req.add_candidate_ids(1);
    req.set_allow_lagging(allow_lagging);
    for (const auto& [p, o] : min_offsets) (*req.mutable_min_offsets())[p] = o;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    return stubs_[r]->FilterRecalled(&ctx, req, resp);
  }

  // Item 1 is on both copies, then replica r's disk refuses writes and item
  // 2 is written: r's consumer stalls on it until its lag passes
  // --max_serving_lag and it stops serving.
  void MakeLag(const std::vector<int32_t>& lagging) {
    bool removed = false;
    exposure::v1::RecordExposureResponse first;
    ASSERT_TRUE(Record(kGood, 1, &first).ok());
    ASSERT_EQ(first.written_offsets().count(partition_), 1u);
    const int64_t first_offset = first.written_offsets().at(partition_);
    exposure::v1::FilterRecalledResponse resp;
    for (int32_t r : {kGood, kSlow}) {
      ASSERT_TRUE(WaitFor([&] {
        return Recall(r, user_, 1, &removed).ok() && removed;
      })) << r;
      // Visible is not yet applied for min_offsets: a copy marks a batch
      // applied once its consumer offsets are durable, after the store has
      // it. The disk fault below must not catch the first write between
      // the two, or no read naming its offset would ever be answered.
      ASSERT_TRUE(WaitFor([&] {
        return RecallOn(r, false, &resp, {{partition_, first_offset}}).ok();
      })) << r;
    }
    for (int32_t r : lagging) disks_[r].FailWrites("wal-", ENOSPC);
    ASSERT_TRUE(Record(kGood, 2, &second_write_).ok());
    for (int32_t r : lagging) {
      ASSERT_TRUE(WaitFor([&] { return !servers_[r]->readiness().serving(); }))
          << r;
    }
  }

  // The value of `family`'s sample with label rpc=`rpc` (counters), or its
  // sample count (the histogram, rpc empty); -1 when absent.
  double Metric(int32_t r, const std::string& family,
                const std::string& rpc = "") {
    for (const prometheus::MetricFamily& f :
         servers_[r]->readiness().Collect()) {
      if (f.name != family) continue;
      for (const prometheus::ClientMetric& m : f.metric) {
        if (rpc.empty()) return static_cast<double>(m.histogram.sample_count);
        for (const auto& l : m.label) {
          if (l.name == "rpc" && l.value == rpc) return m.counter.value;
        }
      }
    }
    return -1;
  }

  FaultyDiskIo disks_[kReplicas];
  std::map<int32_t, ServerConfig> configs_;
  std::string user_;
  int32_t partition_ = -1;
  exposure::v1::RecordExposureResponse second_write_;
};

TEST_F(LaggingReadsTest, ALaggingCopyAnswersOnlyAReadThatAllowsLagging) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(MakeLag({kSlow}));
  exposure::v1::FilterRecalledResponse resp;
  const grpc::Status refused = RecallOn(kSlow, false, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("FilterRecalled: this copy is lagging "));
  EXPECT_THAT(refused.error_message(),
              HasSubstr("or this copy as a last try with allow_lagging"));

  const grpc::Status answered = RecallOn(kSlow, true, &resp);
  ASSERT_TRUE(answered.ok()) << answered.error_message();
  EXPECT_TRUE(resp.has_staleness());
  EXPECT_TRUE(resp.staleness().lagging());
  EXPECT_EQ(resp.staleness().partition(), partition_);
  // It stopped serving because the user's partition (the only one written)
  // lagged past the 1 s bound, and it has not applied anything since.
  EXPECT_GE(resp.staleness().lag_ms(), 1000);
  EXPECT_EQ(
      servers_[kSlow]->readiness().lagging_answers(GatedRead::kFilterRecalled),
      1u);

  // The serving owner says how stale it is too, within its bound.
  exposure::v1::FilterRecalledResponse fresh;
  ASSERT_TRUE(RecallOn(kGood, true, &fresh).ok());
  EXPECT_TRUE(fresh.has_staleness());
  EXPECT_FALSE(fresh.staleness().lagging());
  EXPECT_EQ(fresh.staleness().partition(), partition_);
  EXPECT_EQ(
      servers_[kGood]->readiness().lagging_answers(GatedRead::kFilterRecalled),
      0u);
}

// Unknown lag is not zero lag: a caught-up copy cut off from the brokers
// learns of no new message, so the lag its samples give stays 0; past
// --max_serving_lag without word from the brokers it counts as lagging at
// least that long, and says why. (One mock broker: every copy is cut off.)
TEST_F(LaggingReadsTest, ACopyCutOffFromTheBrokersCountsAsLagging) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(Record(kGood, 1).ok());
  for (int32_t r : {kGood, kSlow}) {
    bool removed = false;
    ASSERT_TRUE(WaitFor([&] {
      return Recall(r, user_, 1, &removed).ok() && removed;
    })) << r;
  }
  // 1 while the brokers have not confirmed the user's partition.
  auto unknown_lag = [&](int32_t r) {
    for (const prometheus::MetricFamily& f :
         servers_[r]->readiness().Collect()) {
      if (f.name != "exposure_filter_serving_lag_unknown") continue;
      for (const prometheus::ClientMetric& m : f.metric) {
        for (const auto& l : m.label) {
          if (l.name == "partition" && l.value == std::to_string(partition_)) {
            return m.gauge.value;
          }
        }
      }
    }
    return -1.0;
  };
  EXPECT_EQ(unknown_lag(kSlow), 0);

  cluster_->SetBrokerDown(1);
  // The copy stops serving when its first partition passes the bound; the
  // user's partition (probed a little later in the same round) passes it
  // soon after.
  ASSERT_TRUE(WaitFor([&] {
    return !servers_[kSlow]->readiness().serving() && unknown_lag(kSlow) == 1;
  }));
  exposure::v1::FilterRecalledResponse resp;
  const grpc::Status refused = RecallOn(kSlow, false, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("FilterRecalled: this copy has not heard from the "
                        "Kafka brokers about partition "));
  EXPECT_THAT(refused.error_message(),
              HasSubstr("its lag is unknown, at least that long"));
  // A last try is answered, and says the answer is at least a bound stale.
  // The answer carries the partition's lag as the copy last sampled it
  // (every 100 ms): the sample after the partition passed the bound says so.
  grpc::Status answered;
  ASSERT_TRUE(WaitFor([&] {
    answered = RecallOn(kSlow, true, &resp);
    return answered.ok() && resp.staleness().lag_ms() >= 1000;
  })) << answered.error_message()
      << " lag_ms " << resp.staleness().lag_ms();
  EXPECT_TRUE(resp.staleness().lagging());
  EXPECT_EQ(unknown_lag(kSlow), 1);

  // The brokers are back: the copy hears them and serves again by itself.
  cluster_->SetBrokerUp(1);
  ASSERT_TRUE(WaitFor([&] { return servers_[kSlow]->readiness().serving(); }));
  EXPECT_EQ(unknown_lag(kSlow), 0);
  ASSERT_TRUE(RecallOn(kSlow, false, &resp).ok());
}

TEST_F(LaggingReadsTest, EveryGatedReadTakesAllowLagging) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(MakeLag({kSlow}));
  {
    exposure::v1::GetFilterRequest req;
    req.set_user_id(user_);
    req.set_allow_lagging(true);
    exposure::v1::GetFilterResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    const grpc::Status s = stubs_[kSlow]->GetFilter(&ctx, req, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(out.staleness().lagging());
  }
  {
    exposure::v1::GetUserStatsRequest req;
    req.set_user_id(user_);
    req.set_allow_lagging(true);
    exposure::v1::GetUserStatsResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    const grpc::Status s = stubs_[kSlow]->GetUserStats(&ctx, req, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(out.staleness().lagging());
  }
  {
    exposure::v1::ExplainRequest req;
    req.set_user_id(user_);
    req.add_item_ids(1);
    req.set_allow_lagging(true);
    exposure::v1::ExplainResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    const grpc::Status s = stubs_[kSlow]->Explain(&ctx, req, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(out.staleness().lagging());
  }
  exposure::v1::FilterRecalledResponse resp;
  ASSERT_TRUE(RecallOn(kSlow, true, &resp).ok());
  // One answer per RPC, each counted under its name, and the lag of each.
  for (const char* rpc :
       {"FilterRecalled", "GetFilter", "GetUserStats", "Explain"}) {
    EXPECT_EQ(Metric(kSlow, "exposure_filter_reads_lagging_served_total", rpc),
              1)
        << rpc;
  }
  EXPECT_EQ(Metric(kSlow, "exposure_filter_reads_lagging_served_lag_seconds"),
            4);
  EXPECT_EQ(Metric(kGood, "exposure_filter_reads_lagging_served_lag_seconds"),
            0);
}

TEST_F(LaggingReadsTest, AReplayingCopyRefusesEvenAReadThatAllowsLagging) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(Record(kGood, 1).ok());
  bool removed = false;
  ASSERT_TRUE(WaitFor(
      [&] { return Recall(kSlow, user_, 1, &removed).ok() && removed; }));
  // Written while the slow copy is down; it replays them at its start,
  // taking them into a batch it records only after --kafka_max_batch_wait:
  // the replay lasts at least that long.
  servers_[kSlow].reset();
  for (uint64_t item = 2; item < 12; ++item) {
    ASSERT_TRUE(Record(kGood, item).ok());
  }
  ServerConfig c = configs_[kSlow];
  c.kafka.max_batch_wait = absl::Seconds(5);
  auto restarted = ExposureFilterServer::Start(c, &clock_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  servers_[kSlow] = *std::move(restarted);
  stubs_[kSlow] = exposure::v1::ExposureFilter::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", servers_[kSlow]->port()),
                          grpc::InsecureChannelCredentials()));
  exposure::v1::FilterRecalledResponse resp;
  grpc::Status refused;
  WaitFor([&] {
    refused = RecallOn(kSlow, true, &resp);
    return refused.ok() ||
           absl::StrContains(refused.error_message(),
                             absl::StrCat("replaying partition ", partition_));
  });
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(),
              HasSubstr(absl::StrCat("FilterRecalled: this copy is replaying "
                                     "partition ",
                                     partition_)));
  EXPECT_THAT(refused.error_message(),
              HasSubstr("allow_lagging does not apply while replaying"));
  EXPECT_EQ(
      servers_[kSlow]->readiness().lagging_answers(GatedRead::kFilterRecalled),
      0u);
}

TEST_F(LaggingReadsTest, MinOffsetsStillHoldForAReadThatAllowsLagging) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(MakeLag({kSlow}));
  // Item 2's offset is what the stalled copy has not applied.
  ASSERT_EQ(second_write_.written_offsets().count(partition_), 1u);
  const int64_t second = second_write_.written_offsets().at(partition_);
  exposure::v1::FilterRecalledResponse resp;
  const grpc::Status refused =
      RecallOn(kSlow, true, &resp, {{partition_, second}});
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(),
              HasSubstr(absl::StrCat("FilterRecalled: min_offsets[", partition_,
                                     "]: this copy has applied")));
  // The write before it is applied: that read is answered, lagging.
  const grpc::Status answered =
      RecallOn(kSlow, true, &resp, {{partition_, second - 1}});
  ASSERT_TRUE(answered.ok()) << answered.error_message();
  EXPECT_TRUE(resp.staleness().lagging());
}

TEST_F(LaggingReadsTest, TheRoutingClientReadsWhileBothOwnersLag) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE((MakeLag({kGood, kSlow})));
  // Each owner refuses a read that does not allow lagging.
  exposure::v1::FilterRecalledResponse resp;
  for (int32_t r : {kGood, kSlow}) {
    EXPECT_EQ(RecallOn(r, false, &resp).error_code(),
              grpc::StatusCode::UNAVAILABLE)
        << r;
  }
  auto router = RoutingClient::Connect(ClusterRoutingOptions(servers_),
                                       grpc::InsecureChannelCredentials());
  ASSERT_TRUE(router.ok()) << router.status();
  exposure::v1::FilterRecalledRequest req;
  req.set_user_id(user_);
  req.add_candidate_ids(1);
  absl::StatusOr<exposure::v1::FilterRecalledResponse> answer =
      (*router)->FilterRecalled(req);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->kept_ids_size(), 0);  // item 1 is on every copy
  EXPECT_TRUE(answer->staleness().lagging());
  EXPECT_EQ(answer->staleness().partition(), partition_);
  const RoutingStats stats = (*router)->stats();
  EXPECT_EQ(stats.lagging_answers, 1u);
  EXPECT_EQ(stats.failovers, 1u);
  // Owner 0 refused the fresh read; the last owner answered the lagging one.
  const std::vector<int32_t> owners = (*router)->OwnersForUser(user_);
  ASSERT_EQ(owners.size(), 2u);
  EXPECT_EQ(stats.replica_errors[owners[0]], 1u);
  EXPECT_EQ(servers_[owners[0]]->readiness().lagging_answers(
                GatedRead::kFilterRecalled),
            0u);
  EXPECT_EQ(servers_[owners[1]]->readiness().lagging_answers(
                GatedRead::kFilterRecalled),
            1u);
}

// Not replicated: reads are never gated, so the flag changes nothing and
// the answer carries no staleness (every acknowledged write is applied).
TEST(LaggingReadsStandaloneTest, AServerThatIsNotReplicatedIgnoresTheFlag) {
  SystemClock clock;
  ServerConfig c;
  c.listen_address = "127.0.0.1:0";
  c.shards = 4;
  auto server = ExposureFilterServer::Start(c, &clock);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = exposure::v1::ExposureFilter::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials()));
  exposure::v1::FilterRecalledRequest req;
  req.set_user_id("alice");
  req.add_candidate_ids(1);
  req.set_allow_lagging(true);
  exposure::v1::FilterRecalledResponse out;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  ASSERT_TRUE(stub->FilterRecalled(&ctx, req, &out).ok());
  EXPECT_FALSE(out.has_staleness());
}

}  // namespace
}  // namespace exposure_filter
