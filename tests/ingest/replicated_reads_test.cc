// Lag-gated reads and read-your-writes against librdkafka's mock cluster,
// three real servers in-process (P = 6, N = 3,
// R = 2). A copy that cannot apply the log (its disk refuses the writes,
// so its consumer stalls) or is replaying it after a restart reports
// NOT_SERVING and answers reads UNAVAILABLE naming the lag and partition,
// then SERVING once caught up; a read carrying a write's offsets
// (min_offsets) is refused by a copy that has not applied them and served
// once it has. Waits poll with generous deadlines; nothing measures time.
#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/partitioning.h"
#include "exposure_filter/routing_client.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/ingest/replicated_cluster_routing.h"
#include "tests/ingest/replicated_cluster_test_base.h"
#include "tests/persist/faulty_disk_io.h"

namespace exposure_filter {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;
using testing_util::FaultyDiskIo;

// Owners 0 and 1; replica 1 is the one made to lag.
constexpr int32_t kGood = 0;
constexpr int32_t kSlow = 1;

// The first user "r-<i>" whose owners are exactly {kGood, kSlow}.
std::string UserOfBoth() { return UserOwnedBy("r-", kGood, kSlow); }

class ReplicatedReadsTest : public ReplicatedClusterTest {
 protected:
  // Starts the three replicas; kSlow's data_dir writes through `slow_disk_`;
  // every replica gets `max_serving_lag`.
  void StartWith(absl::Duration max_serving_lag) {
    edit_config_ = [this, max_serving_lag](ServerConfig* c) {
      c->max_serving_lag = max_serving_lag;
      if (c->cluster.replica_ordinal == kSlow) {
        c->durability.disk_io = &slow_disk_;
      }
      configs_[c->cluster.replica_ordinal] = *c;
    };
    StartAll();
  }

  HealthCheckResponse::ServingStatus HealthOf(int32_t r) {
    auto stub = Health::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", servers_[r]->port()),
                            grpc::InsecureChannelCredentials()));
    HealthCheckRequest req;
    req.set_service("exposure.v1.ExposureFilter");
    HealthCheckResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    if (!stub->Check(&ctx, req, &resp).ok())
      return HealthCheckResponse::UNKNOWN;
    return resp.status();
  }
  bool WaitForHealth(int32_t r, HealthCheckResponse::ServingStatus want) {
    return WaitFor([&] { return HealthOf(r) == want; });
  }

  grpc::Status Record(int32_t r, const std::string& user, uint64_t item,
                      exposure::v1::RecordExposureResponse* resp) {
    exposure::v1::RecordExposureRequest req;
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(item);
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    return stubs_[r]->RecordExposure(&ctx, req, resp);
  }
  // FilterRecalled of one item with `min_offsets`; *removed as Recall.
  grpc::Status RecallAt(int32_t r, const std::string& user, uint64_t item,
                        const std::map<int32_t, int64_t>& min_offsets,
                        bool* removed) {
    exposure::v1::FilterRecalledRequest req;
    req.set_user_id(user);
    req.add_candidate_ids(item);
    for (const auto& [p, o] : min_offsets) (*req.mutable_min_offsets())[p] = o;
    exposure::v1::FilterRecalledResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    const grpc::Status s = stubs_[r]->FilterRecalled(&ctx, req, &resp);
    *removed = s.ok() && resp.kept_ids_size() == 0;
    return s;
  }
  // Restarts replica r on its data_dir with `edit` applied to its config.
  void Restart(int32_t r, const std::function<void(ServerConfig*)>& edit) {
    servers_[r].reset();
    ServerConfig c = configs_[r];
    edit(&c);
    auto s = ExposureFilterServer::Start(c, &clock_);
    ASSERT_TRUE(s.ok()) << s.status();
    servers_[r] = *std::move(s);
    stubs_[r] = exposure::v1::ExposureFilter::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", servers_[r]->port()),
                            grpc::InsecureChannelCredentials()));
  }

  FaultyDiskIo slow_disk_;
  std::map<int32_t, ServerConfig> configs_;
};

TEST_F(ReplicatedReadsTest, ACopyThatCannotApplyTheLogStopsServingReads) {
  StartWith(absl::Seconds(1));
  for (int32_t r = 0; r < kReplicas; ++r) {
    ASSERT_TRUE(WaitForHealth(r, HealthCheckResponse::SERVING)) << r;
  }
  const std::string user = UserOfBoth();
  const int32_t partition = KafkaPartitionForKey(user, kPartitions);
  exposure::v1::RecordExposureResponse resp;
  ASSERT_TRUE(Record(kGood, user, 1, &resp).ok());
  bool removed = false;
  ASSERT_TRUE(WaitFor(
      [&] { return RecallAt(kSlow, user, 1, {}, &removed).ok() && removed; }));

  // The slow copy's disk is full: its consumer's next batch is refused and
  // retried, the partition stalls while Kafka (and the other copy) move on.
  slow_disk_.FailWrites("wal-", ENOSPC);
  ASSERT_TRUE(Record(kGood, user, 2, &resp).ok());
  ASSERT_TRUE(WaitForHealth(kSlow, HealthCheckResponse::NOT_SERVING));
  const grpc::Status refused = RecallAt(kSlow, user, 2, {}, &removed);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("FilterRecalled: this copy is lagging "));
  EXPECT_THAT(refused.error_message(),
              HasSubstr(absl::StrCat(" behind on partition ", partition,
                                     " (--max_serving_lag=1s")));
  // Every read RPC is gated, writes are not (Kafka takes them).
  {
    exposure::v1::GetFilterRequest req;
    req.set_user_id(user);
    exposure::v1::GetFilterResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    EXPECT_EQ(stubs_[kSlow]->GetFilter(&ctx, req, &out).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
  {
    exposure::v1::GetUserStatsRequest req;
    req.set_user_id(user);
    exposure::v1::GetUserStatsResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    EXPECT_EQ(stubs_[kSlow]->GetUserStats(&ctx, req, &out).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
  {
    exposure::v1::ExplainRequest req;
    req.set_user_id(user);
    req.add_item_ids(2);
    exposure::v1::ExplainResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    EXPECT_EQ(stubs_[kSlow]->Explain(&ctx, req, &out).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_TRUE(Record(kSlow, user, 3, &resp).ok());
  // The other owner serves the read, with the write.
  ASSERT_TRUE(WaitFor(
      [&] { return RecallAt(kGood, user, 2, {}, &removed).ok() && removed; }));
  EXPECT_EQ(HealthOf(kGood), HealthCheckResponse::SERVING);

  // The disk takes writes again: the copy catches up and serves by itself.
  slow_disk_.Heal();
  ASSERT_TRUE(WaitForHealth(kSlow, HealthCheckResponse::SERVING));
  for (uint64_t item : {2, 3}) {
    EXPECT_TRUE(WaitFor([&] {
      return RecallAt(kSlow, user, item, {}, &removed).ok() && removed;
    })) << item;
  }
  EXPECT_GE(servers_[kSlow]->readiness().health_flips(), 2u);
}

TEST_F(ReplicatedReadsTest, ARestartedCopyIsNotServingWhileItReplays) {
  StartWith(absl::Seconds(1));
  const std::string user = UserOfBoth();
  const int32_t partition = KafkaPartitionForKey(user, kPartitions);
  exposure::v1::RecordExposureResponse resp;
  ASSERT_TRUE(Record(kGood, user, 1, &resp).ok());
  bool removed = false;
  ASSERT_TRUE(WaitFor(
      [&] { return RecallAt(kSlow, user, 1, {}, &removed).ok() && removed; }));
  // Written while the slow copy is down; it replays them at its start,
  // taking them into a batch it records only after --kafka_max_batch_wait:
  // the replay lasts at least that long.
  servers_[kSlow].reset();
  for (uint64_t item = 2; item < 12; ++item) {
    ASSERT_TRUE(Record(kGood, user, item, &resp).ok());
  }
  Restart(kSlow,
          [](ServerConfig* c) { c->kafka.max_batch_wait = absl::Seconds(5); });
  EXPECT_EQ(HealthOf(kSlow), HealthCheckResponse::NOT_SERVING);
  grpc::Status refused;
  WaitFor([&] {
    refused = RecallAt(kSlow, user, 11, {}, &removed);
    return refused.ok() ||
           absl::StrContains(refused.error_message(),
                             absl::StrCat("replaying partition ", partition));
  });
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(
      refused.error_message(),
      HasSubstr(absl::StrCat("FilterRecalled: this copy is replaying "
                             "partition ",
                             partition, " from Kafka after its start")));
  ASSERT_TRUE(WaitForHealth(kSlow, HealthCheckResponse::SERVING));
  for (uint64_t item = 1; item < 12; ++item) {
    EXPECT_TRUE(RecallAt(kSlow, user, item, {}, &removed).ok() && removed)
        << item;
  }
}

TEST_F(ReplicatedReadsTest, AReadWithAWritesOffsetsWaitsForThem) {
  // The lag gate off: only min_offsets decide here.
  StartWith(absl::ZeroDuration());
  const std::string user = UserOfBoth();
  const int32_t p = KafkaPartitionForKey(user, kPartitions);
  exposure::v1::RecordExposureResponse first;
  ASSERT_TRUE(Record(kGood, user, 1, &first).ok());
  // The first message of the partition: offset 0.
  EXPECT_EQ(first.written_offsets_size(), 1);
  EXPECT_EQ(first.written_offsets().at(p), 0);
  bool removed = false;
  for (int32_t r : {kGood, kSlow}) {
    ASSERT_TRUE(WaitFor([&] {
      return RecallAt(r, user, 1, {{p, 0}}, &removed).ok() && removed;
    })) << r;
  }

  slow_disk_.FailWrites("wal-", ENOSPC);
  exposure::v1::RecordExposureResponse second;
  ASSERT_TRUE(Record(kSlow, user, 2, &second).ok());  // via the slow one
  ASSERT_EQ(second.written_offsets_size(), 1);
  ASSERT_EQ(second.written_offsets().at(p), 1);
  const std::map<int32_t, int64_t> token{{p, 1}};
  // The good copy applies it and serves the read with the write in it.
  ASSERT_TRUE(WaitFor([&] {
    return RecallAt(kGood, user, 2, token, &removed).ok() && removed;
  }));
  // The slow one has applied offset 0 only: it refuses, naming both.
  const grpc::Status refused = RecallAt(kSlow, user, 2, token, &removed);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(),
              HasSubstr(absl::StrCat("FilterRecalled: min_offsets[", p,
                                     "]: this copy has applied partition ", p,
                                     " up to offset 0, the read needs offset "
                                     "1 applied")));
  // Without the token it serves (the gate is off), with what it has.
  EXPECT_TRUE(RecallAt(kSlow, user, 1, {}, &removed).ok());
  // Applied, it serves the read.
  slow_disk_.Heal();
  EXPECT_TRUE(WaitFor([&] {
    return RecallAt(kSlow, user, 2, token, &removed).ok() && removed;
  }));
}

TEST_F(ReplicatedReadsTest, TheRoutingClientReadsItsOwnWritesThroughFailover) {
  StartWith(absl::ZeroDuration());  // only the offsets decide
  // A user whose preferred owner (owner 0) is the slow copy.
  std::string user;
  for (int i = 0; user.empty(); ++i) {
    const std::string u = absl::StrCat("c-", i);
    if (OwnersOfUser(u, kPartitions, kReplicas, kReplication)[0] == kSlow) {
      user = u;
    }
  }
  auto router_with = [&](bool read_your_writes) {
    auto router = RoutingClient::Connect(
        ClusterRoutingOptions(servers_, read_your_writes),
        grpc::InsecureChannelCredentials());
    EXPECT_TRUE(router.ok()) << router.status();
    return *std::move(router);
  };
  const std::unique_ptr<RoutingClient> ryw = router_with(true);
  const std::unique_ptr<RoutingClient> plain = router_with(false);
  auto write = [&](uint64_t item) {
    exposure::v1::RecordExposureRequest req;
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(item);
    return ryw->RecordExposure(req).status();
  };
  auto recall = [&](const RoutingClient& router, uint64_t item, bool* removed) {
    exposure::v1::FilterRecalledRequest req;
    req.set_user_id(user);
    req.add_candidate_ids(item);
    absl::StatusOr<exposure::v1::FilterRecalledResponse> resp =
        router.FilterRecalled(req);
    *removed = resp.ok() && resp->kept_ids_size() == 0;
    return resp.status();
  };
  bool removed = false;
  ASSERT_TRUE(write(1).ok());
  ASSERT_TRUE(
      WaitFor([&] { return recall(*plain, 1, &removed).ok() && removed; }));

  // The slow copy's disk fails on the batch of item 2, which it then retries
  // (that batch reached its memory before the log refused it); item 3 is
  // behind it in the log and never reaches the slow copy.
  slow_disk_.FailWrites("wal-", ENOSPC);
  ASSERT_TRUE(write(2).ok());
  ASSERT_TRUE(WaitFor(
      [&] { return !servers_[kSlow]->durability()->WriteStatus().ok(); }));
  ASSERT_TRUE(write(3).ok());
  // Without tokens the preferred owner answers, without the write: a
  // stale read (what --max_serving_lag bounds, here turned off).
  ASSERT_TRUE(recall(*plain, 3, &removed).ok());
  EXPECT_FALSE(removed);
  // With them it refuses, the read fails over to the other owner, which
  // has the write (once it applied it: until then both refuse).
  EXPECT_TRUE(
      WaitFor([&] { return recall(*ryw, 3, &removed).ok() && removed; }));
  const RoutingStats stats = ryw->stats();
  EXPECT_GE(stats.reads_with_offsets, 1u);
  EXPECT_GE(stats.failovers, 1u);
  EXPECT_GE(stats.replica_errors[kSlow], 1u);
  slow_disk_.Heal();
}

TEST_F(ReplicatedReadsTest, BadMinOffsetsAreRefusedNamingTheField) {
  StartWith(absl::Seconds(1));
  ASSERT_TRUE(WaitForHealth(kGood, HealthCheckResponse::SERVING));
  const std::string user = UserOfBoth();
  const int32_t p = KafkaPartitionForKey(user, kPartitions);
  // A partition replica kGood (0) does not own: (0 - q) mod 3 == 2.
  const int32_t foreign = 1;
  bool removed = false;
  struct Case {
    std::map<int32_t, int64_t> offsets;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{-1, 0}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "min_offsets: partition -1 does not exist (--partitions=6: 0 to 5)"},
      {{{6, 0}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "min_offsets: partition 6 does not exist (--partitions=6: 0 to 5)"},
      {{{p, -5}},
       grpc::StatusCode::INVALID_ARGUMENT,
       absl::StrCat("min_offsets[", p,
                    "]: offset -5 is negative (Kafka offsets start at 0)")},
      {{{foreign, 0}},
       grpc::StatusCode::FAILED_PRECONDITION,
       absl::StrCat("min_offsets[", foreign, "]: partition ", foreign,
                    " of 6, owned by replicas 1, 2, not by this replica 0 of "
                    "3")},
  };
  for (const Case& c : cases) {
    const grpc::Status s = RecallAt(kGood, user, 1, c.offsets, &removed);
    EXPECT_EQ(s.error_code(), c.code) << c.message;
    EXPECT_THAT(s.error_message(), HasSubstr(c.message));
  }
  // Every read takes the field.
  {
    exposure::v1::GetFilterRequest req;
    req.set_user_id(user);
    (*req.mutable_min_offsets())[p] = -1;
    exposure::v1::GetFilterResponse out;
    grpc::ClientContext ctx;
    const grpc::Status s = stubs_[kGood]->GetFilter(&ctx, req, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("min_offsets["));
  }
  {
    exposure::v1::GetUserStatsRequest req;
    req.set_user_id(user);
    (*req.mutable_min_offsets())[p] = -1;
    exposure::v1::GetUserStatsResponse out;
    grpc::ClientContext ctx;
    const grpc::Status s = stubs_[kGood]->GetUserStats(&ctx, req, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("min_offsets["));
  }
  {
    exposure::v1::ExplainRequest req;
    req.set_user_id(user);
    req.add_item_ids(1);
    (*req.mutable_min_offsets())[p] = 1000;  // valid, never applied
    exposure::v1::ExplainResponse out;
    grpc::ClientContext ctx;
    const grpc::Status s = stubs_[kGood]->Explain(&ctx, req, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(s.error_message(),
                HasSubstr(absl::StrCat("Explain: min_offsets[", p, "]")));
  }
}

TEST_F(ReplicatedReadsTest, AServerThatIsNotReplicatedRefusesMinOffsets) {
  ServerConfig c;
  c.listen_address = "127.0.0.1:0";
  c.shards = 4;
  auto server = ExposureFilterServer::Start(c, &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = exposure::v1::ExposureFilter::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials()));
  exposure::v1::FilterRecalledRequest req;
  req.set_user_id("alice");
  req.add_candidate_ids(1);
  exposure::v1::FilterRecalledResponse out;
  {
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub->FilterRecalled(&ctx, req, &out).ok());
  }
  (*req.mutable_min_offsets())[0] = 5;
  grpc::ClientContext ctx;
  const grpc::Status s = stub->FilterRecalled(&ctx, req, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("min_offsets: read-your-writes offsets are for a "
                        "replicated deployment"));
  // Its writes carry no offsets: it applies them itself.
  exposure::v1::RecordExposureRequest w;
  w.add_exposures()->set_user_id("alice");
  w.mutable_exposures(0)->add_item_ids(1);
  exposure::v1::RecordExposureResponse wr;
  grpc::ClientContext wctx;
  ASSERT_TRUE(stub->RecordExposure(&wctx, w, &wr).ok());
  EXPECT_EQ(wr.written_offsets_size(), 0);
}

TEST_F(ReplicatedReadsTest, ANegativeMaxServingLagIsAStartupError) {
  ServerConfig c = Config(0);
  c.max_serving_lag = absl::Seconds(-1);
  auto server = ExposureFilterServer::Start(c, &clock_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("--max_serving_lag=-1s: must be a finite duration"));
}

}  // namespace
}  // namespace exposure_filter
