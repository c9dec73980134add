// Scale-out: a partitioned replica serves only its own users.
// Every RPC naming a user answers FAILED_PRECONDITION for another replica's
// user (field, partition and owner named, the OwnerHint payload attached),
// a mixed RecordExposure writes nothing, unpartitioned handlers are
// unchanged, the gRPC edge sends the hint as trailing metadata, and a
// restart under a larger --replicas drops the users the replica lost.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/owner_hint.h"
#include "exposure_filter/partitioning.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/server/exposure_filter_server.h"
#include "src/server/user_ownership_gate.h"
#include "src/store/clock.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kNowMs = 1'700'000'000'000;
constexpr int32_t kPartitions = 12;
constexpr int32_t kReplicas = 3;
constexpr int32_t kSelf = 1;
constexpr char kTemplate[] = "ef-{ordinal}.ef:50051";

// The first user "u<i>" owned by `replica` under P = 12, N = 3.
std::string UserOf(int32_t replica, int skip = 0) {
  for (int i = 0;; ++i) {
    std::string user = absl::StrCat("u", i);
    if (ReplicaForUser(user, kPartitions, kReplicas) == replica &&
        skip-- == 0) {
      return user;
    }
  }
}

ClusterOptions Cluster(int32_t partitions, int32_t replicas, int32_t self) {
  ClusterOptions c;
  c.partitions = partitions;
  c.replicas = replicas;
  c.replica_ordinal = self;
  return c;
}

// A FailedPrecondition naming `field` and the owner of `user`.
void ExpectForeign(const absl::Status& s, const std::string& field,
                   const std::string& user) {
  const int32_t partition = KafkaPartitionForKey(user, kPartitions);
  const int32_t owner = ReplicaForPartition(partition, kReplicas);
  ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              StartsWith(absl::StrCat(field, ": user \"", user,
                                      "\" is in partition ", partition)));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("owned by replica ", owner, " (ef-", owner,
                                     ".ef:50051)")));
  std::optional<OwnerHint> hint = OwnerHint::FromStatus(s);
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(hint->ordinal, owner);
  EXPECT_EQ(hint->partition, partition);
  EXPECT_EQ(hint->partitions, kPartitions);
  EXPECT_EQ(hint->replicas, kReplicas);
  EXPECT_EQ(hint->self, kSelf);
  EXPECT_EQ(hint->address, absl::StrCat("ef-", owner, ".ef:50051"));
}

class OwnershipHandlersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto registry = SurfaceRegistry::Create(FilterPolicyOptions{}, {}, 8);
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    store_ = std::make_unique<ShardedFilterStore>(4, &clock_, registry_.get());
    handlers_ = std::make_unique<ExposureFilterHandlers>(
        registry_.get(), store_.get(), RequestLimits{});
    handlers_->AttachOwnership(&gate_);
  }

  absl::Status Record(const std::vector<std::string>& users) {
    exposure::v1::RecordExposureRequest req;
    req.set_surface("homefeed");
    for (const std::string& u : users) {
      exposure::v1::Exposure* e = req.add_exposures();
      e->set_user_id(u);
      e->add_item_ids(7);
    }
    exposure::v1::RecordExposureResponse resp;
    return handlers_->RecordExposure(req, &resp);
  }

  ManualClock clock_{kNowMs};
  UserOwnershipGate gate_{Cluster(kPartitions, kReplicas, kSelf), kTemplate};
  std::unique_ptr<SurfaceRegistry> registry_;
  std::unique_ptr<ShardedFilterStore> store_;
  std::unique_ptr<ExposureFilterHandlers> handlers_;
};

TEST_F(OwnershipHandlersTest, OwnUsersAreServed) {
  const std::string mine = UserOf(kSelf);
  ASSERT_TRUE(Record({mine, UserOf(kSelf, 1)}).ok());
  exposure::v1::FilterRecalledRequest req;
  req.set_surface("homefeed");
  req.set_user_id(mine);
  req.add_candidate_ids(7);
  req.add_candidate_ids(8);
  exposure::v1::FilterRecalledResponse resp;
  ASSERT_TRUE(handlers_->FilterRecalled(req, &resp).ok());
  EXPECT_THAT(resp.kept_ids(), ElementsAre(8));
}

TEST_F(OwnershipHandlersTest, RecordExposureWithAForeignUserWritesNothing) {
  const std::string mine = UserOf(kSelf);
  const std::string theirs = UserOf(2);
  ExpectForeign(Record({mine, UserOf(kSelf, 1), theirs, UserOf(0)}),
                "exposures[2].user_id", theirs);
  // All or nothing: the owned users before the foreign one were not written.
  exposure::v1::GetUserStatsRequest req;
  req.set_surface("homefeed");
  req.set_user_id(mine);
  exposure::v1::GetUserStatsResponse resp;
  ASSERT_TRUE(handlers_->GetUserStats(req, &resp).ok());
  EXPECT_FALSE(resp.exists());
  EXPECT_EQ(store_->Usage(1).users, 0u);
}

TEST_F(OwnershipHandlersTest, EveryReadAndDeleteOfAForeignUserIsRefused) {
  const std::string theirs = UserOf(0);
  {
    exposure::v1::FilterRecalledRequest req;
    req.set_user_id(theirs);
    req.add_candidate_ids(1);
    exposure::v1::FilterRecalledResponse resp;
    ExpectForeign(handlers_->FilterRecalled(req, &resp), "user_id", theirs);
  }
  {
    exposure::v1::GetFilterRequest req;
    req.set_user_id(theirs);
    exposure::v1::GetFilterResponse resp;
    ExpectForeign(handlers_->GetFilter(req, &resp), "user_id", theirs);
  }
  {
    exposure::v1::GetUserStatsRequest req;
    req.set_user_id(theirs);
    exposure::v1::GetUserStatsResponse resp;
    ExpectForeign(handlers_->GetUserStats(req, &resp), "user_id", theirs);
  }
  {
    exposure::v1::DeleteUserRequest req;
    req.set_user_id(theirs);
    exposure::v1::DeleteUserResponse resp;
    ExpectForeign(handlers_->DeleteUser(req, &resp), "user_id", theirs);
  }
  {
    exposure::v1::ExplainRequest req;
    req.set_user_id(theirs);
    req.add_item_ids(1);
    exposure::v1::ExplainResponse resp;
    ExpectForeign(handlers_->Explain(req, &resp), "user_id", theirs);
  }
}

TEST_F(OwnershipHandlersTest, TracingAForeignUserIsRefusedWhole) {
  const std::string theirs = UserOf(2);
  {
    exposure::v1::AddTracedUsersRequest req;
    req.add_user_ids(UserOf(kSelf));
    req.add_user_ids(theirs);
    exposure::v1::AddTracedUsersResponse resp;
    ExpectForeign(handlers_->AddTracedUsers(req, &resp), "user_ids[1]", theirs);
    EXPECT_EQ(handlers_->trace_log().size(), 0u);
  }
  {
    exposure::v1::RemoveTracedUsersRequest req;
    req.add_user_ids(theirs);
    exposure::v1::RemoveTracedUsersResponse resp;
    ExpectForeign(handlers_->RemoveTracedUsers(req, &resp), "user_ids[0]",
                  theirs);
  }
}

TEST_F(OwnershipHandlersTest, InvalidInputIsReportedBeforeOwnership) {
  exposure::v1::FilterRecalledRequest req;  // empty user_id, not a user
  req.add_candidate_ids(1);
  exposure::v1::FilterRecalledResponse resp;
  EXPECT_EQ(handlers_->FilterRecalled(req, &resp).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(OwnershipHandlersTest, ServerStatsShowThePartitionsOwned) {
  exposure::v1::GetServerStatsResponse resp;
  ASSERT_TRUE(handlers_->GetServerStats({}, &resp).ok());
  EXPECT_EQ(resp.partitions(), 12u);
  EXPECT_EQ(resp.replicas(), 3u);
  EXPECT_EQ(resp.replica_ordinal(), 1u);
  EXPECT_THAT(resp.owned_partitions(), ElementsAre(1, 4, 7, 10));
}

// With R = 2 replica 1 also serves the users of the partitions it
// is owner 1 of (p mod 3 == 0), refuses the rest naming both owners, and the
// hint carries R; with R = 1 the hint's text is what it always was.
TEST(ReplicatedGateTest, OwnerOneServesAndForeignUsersNameEveryOwner) {
  ClusterOptions c = Cluster(kPartitions, kReplicas, kSelf);
  c.replication_factor = 2;
  const UserOwnershipGate gate(c, kTemplate);
  EXPECT_TRUE(gate.Check("user_id", UserOf(0)).ok());  // owners {0, 1}
  EXPECT_TRUE(gate.Check("user_id", UserOf(1)).ok());  // owners {1, 2}
  const std::string theirs = UserOf(2);                // owners {2, 0}
  const absl::Status s = gate.Check("user_id", theirs);
  ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("owned by replicas 2 (ef-2.ef:50051), 0 "
                        "(ef-0.ef:50051), not by this replica 1 of 3"));
  std::optional<OwnerHint> hint = OwnerHint::FromStatus(s);
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(hint->ordinal, 2);
  EXPECT_EQ(hint->replication_factor, 2);
  EXPECT_THAT(gate.CheckDirectWrite("DeleteUser").message(),
              HasSubstr("DeleteUser: --replication_factor=2"));

  const UserOwnershipGate single(Cluster(kPartitions, kReplicas, kSelf),
                                 kTemplate);
  const absl::Status one = single.Check("user_id", UserOf(0));
  const auto payload = one.GetPayload(kOwnerHintPayloadUrl);
  ASSERT_TRUE(payload.has_value());
  EXPECT_EQ(std::string(*payload),
            absl::StrCat("ordinal=0;partition=",
                         KafkaPartitionForKey(UserOf(0), kPartitions),
                         ";partitions=12;replicas=3;self=1;address=ef-0.ef:"
                         "50051"));
  EXPECT_EQ(OwnerHint::FromStatus(one)->replication_factor, 1);
  EXPECT_TRUE(single.CheckDirectWrite("RecordExposure").ok());
}

TEST(UnpartitionedHandlersTest, EveryUserIsServedAndStatsShowNoPartitions) {
  ManualClock clock(kNowMs);
  auto registry = SurfaceRegistry::Create(FilterPolicyOptions{}, {}, 8);
  ASSERT_TRUE(registry.ok());
  ShardedFilterStore store(4, &clock, registry->get());
  ExposureFilterHandlers handlers(registry->get(), &store, RequestLimits{});
  const UserOwnershipGate gate(ClusterOptions{}, kTemplate);
  handlers.AttachOwnership(&gate);
  exposure::v1::RecordExposureRequest req;
  for (int r = 0; r < kReplicas; ++r) {
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(UserOf(r));
    e->add_item_ids(1);
  }
  exposure::v1::RecordExposureResponse resp;
  ASSERT_TRUE(handlers.RecordExposure(req, &resp).ok());
  EXPECT_EQ(resp.items_recorded(), 3u);
  exposure::v1::GetServerStatsResponse stats;
  ASSERT_TRUE(handlers.GetServerStats({}, &stats).ok());
  EXPECT_EQ(stats.partitions(), 0u);
  EXPECT_EQ(stats.replicas(), 0u);
  EXPECT_TRUE(stats.owned_partitions().empty());
}

// --- The real server -------------------------------------------------------

std::string FreshDataDir() {
  static std::vector<std::string>* dirs = [] {
    auto* v = new std::vector<std::string>;
    std::atexit([] {
      for (const std::string& d : *dirs) std::filesystem::remove_all(d);
    });
    return v;
  }();
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "ef_ownership_test_XXXXXX")
          .string();
  dirs->push_back(mkdtemp(tmpl.data()));
  return dirs->back();
}

ServerConfig ReplicaConfig(int32_t partitions, int32_t replicas, int32_t self) {
  ServerConfig c;
  c.listen_address = "127.0.0.1:0";
  c.shards = 4;
  c.cluster = Cluster(partitions, replicas, self);
  c.replica_address_template = kTemplate;
  return c;
}

std::unique_ptr<exposure::v1::ExposureFilter::Stub> StubFor(int port) {
  return exposure::v1::ExposureFilter::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
}

TEST(OwnershipServerTest, TheRefusalCarriesTheOwnerAsTrailingMetadata) {
  ManualClock clock(kNowMs);
  auto server = ExposureFilterServer::Start(
      ReplicaConfig(kPartitions, kReplicas, kSelf), &clock);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string theirs = UserOf(2);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  exposure::v1::FilterRecalledRequest req;
  req.set_user_id(theirs);
  req.add_candidate_ids(1);
  exposure::v1::FilterRecalledResponse resp;
  const grpc::Status s =
      StubFor((*server)->port())->FilterRecalled(&ctx, req, &resp);
  ASSERT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("owned by replica 2 (ef-2.ef:50051)"));
  const auto& trailers = ctx.GetServerTrailingMetadata();
  auto it = trailers.find(kOwnerHintMetadataKey);
  ASSERT_NE(it, trailers.end());
  std::optional<OwnerHint> hint =
      OwnerHint::Decode(std::string(it->second.data(), it->second.size()));
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(hint->ordinal, 2);
  EXPECT_EQ(hint->self, kSelf);
  EXPECT_EQ(hint->address, "ef-2.ef:50051");
}

TEST(OwnershipServerTest, AnImpossibleClusterIsAStartupError) {
  ManualClock clock(kNowMs);
  auto server = ExposureFilterServer::Start(ReplicaConfig(4, 3, 3), &clock);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("--replica_ordinal"));
}

// Resharding from N = 1 to N = 2: replica 0 restarts on the old data_dir
// and must not serve (or keep) the users replica 1 now owns.
TEST(OwnershipServerTest, ARestartUnderMoreReplicasDropsTheUsersItLost) {
  ManualClock clock(kNowMs);
  constexpr int32_t kP = 8;
  ServerConfig before = ReplicaConfig(kP, 1, 0);
  before.durability.data_dir = FreshDataDir();
  std::vector<std::string> kept, lost;
  for (int i = 0; i < 40; ++i) {
    std::string user = absl::StrCat("user-", i);
    (ReplicaForUser(user, kP, 2) == 0 ? kept : lost).push_back(user);
  }
  ASSERT_FALSE(kept.empty());
  ASSERT_FALSE(lost.empty());
  {
    auto server = ExposureFilterServer::Start(before, &clock);
    ASSERT_TRUE(server.ok()) << server.status();
    exposure::v1::RecordExposureRequest req;
    for (const auto* users : {&kept, &lost}) {
      for (const std::string& u : *users) {
        exposure::v1::Exposure* e = req.add_exposures();
        e->set_user_id(u);
        e->add_item_ids(42);
      }
    }
    grpc::ClientContext ctx;
    exposure::v1::RecordExposureResponse resp;
    ASSERT_TRUE(
        StubFor((*server)->port())->RecordExposure(&ctx, req, &resp).ok());
  }
  ServerConfig after = ReplicaConfig(kP, 2, 0);
  after.durability = before.durability;
  for (int life = 0; life < 2; ++life) {
    auto server = ExposureFilterServer::Start(after, &clock);
    ASSERT_TRUE(server.ok()) << server.status();
    auto stub = StubFor((*server)->port());
    grpc::ClientContext ctx;
    exposure::v1::GetServerStatsResponse stats;
    ASSERT_TRUE(stub->GetServerStats(&ctx, {}, &stats).ok());
    EXPECT_EQ(stats.users(), kept.size());
    // The drop is logged like a DeleteUser: the second life finds nothing
    // left to drop.
    EXPECT_EQ(stats.unowned_users_dropped(), life == 0 ? lost.size() : 0u);
    for (const std::string& u : kept) {
      grpc::ClientContext c;
      exposure::v1::FilterRecalledRequest f;
      f.set_user_id(u);
      f.add_candidate_ids(42);
      exposure::v1::FilterRecalledResponse r;
      ASSERT_TRUE(stub->FilterRecalled(&c, f, &r).ok());
      EXPECT_EQ(r.removed_count(), 1u) << u;
    }
  }
}

}  // namespace
}  // namespace exposure_filter
