// RoutingClient against three real replicas in-process (P = 12, N = 3,
// ordinals 0..2): routed calls for random users all succeed, the same calls
// sent straight to a wrong replica are FAILED_PRECONDITION, a client whose
// P/N or address order disagrees with the cluster gets a diagnosis, and a
// batch whose owner is down reports per-owner statuses.
#include "exposure_filter/routing_client.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exposure_filter/owner_hint.h"
#include "exposure_filter/partitioning.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kNowMs = 1'700'000'000'000;
constexpr int32_t kPartitions = 12;
constexpr int kReplicas = 3;

ClientOptions TestOptions() {
  ClientOptions o;
  o.deadline = absl::Seconds(30);  // sanitizer builds are slow
  o.initial_backoff = absl::Milliseconds(1);
  o.max_backoff = absl::Milliseconds(5);
  return o;
}

class RoutingClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < kReplicas; ++r) {
      ServerConfig c;
      c.listen_address = "127.0.0.1:0";
      c.shards = 4;
      c.cluster.partitions = kPartitions;
      c.cluster.replicas = kReplicas;
      c.cluster.replica_ordinal = r;
      auto server = ExposureFilterServer::Start(c, &clock_);
      ASSERT_TRUE(server.ok()) << server.status();
      addresses_.push_back(absl::StrCat("127.0.0.1:", (*server)->port()));
      servers_.push_back(*std::move(server));
    }
    router_ = Router(kPartitions, addresses_);
  }

  std::unique_ptr<RoutingClient> Router(int32_t partitions,
                                        std::vector<std::string> addresses) {
    RoutingOptions o;
    o.partitions = partitions;
    o.replica_addresses = std::move(addresses);
    o.client = TestOptions();
    auto router = RoutingClient::Connect(o, grpc::InsecureChannelCredentials());
    EXPECT_TRUE(router.ok()) << router.status();
    return router.ok() ? *std::move(router) : nullptr;
  }

  // Random user ids, with items derived from them.
  static std::vector<std::string> RandomUsers(int n, uint32_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::string> users;
    for (int i = 0; i < n; ++i) users.push_back(absl::StrCat("user:", rng()));
    return users;
  }

  static exposure::v1::RecordExposureRequest Batch(
      const std::vector<std::string>& users) {
    exposure::v1::RecordExposureRequest req;
    req.set_surface("homefeed");
    for (size_t i = 0; i < users.size(); ++i) {
      exposure::v1::Exposure* e = req.add_exposures();
      e->set_user_id(users[i]);
      e->add_item_ids(1000 + i);
      e->add_item_keys(absl::StrCat("k", i));
    }
    return req;
  }

  static exposure::v1::FilterRecalledRequest Recall(const std::string& user,
                                                    uint64_t item) {
    exposure::v1::FilterRecalledRequest req;
    req.set_surface("homefeed");
    req.set_user_id(user);
    req.add_candidate_ids(item);
    req.add_candidate_ids(1);  // never recorded (ids start at 1000)
    return req;
  }

  ManualClock clock_{kNowMs};
  std::vector<std::unique_ptr<ExposureFilterServer>> servers_;
  std::vector<std::string> addresses_;
  std::unique_ptr<RoutingClient> router_;
};

TEST(StatefulSetReplicaAddressesTest, NamesEachPodBehindTheHeadlessService) {
  EXPECT_THAT(StatefulSetReplicaAddresses("ef", "ef-headless", 50051, 3),
              ElementsAre("ef-0.ef-headless:50051", "ef-1.ef-headless:50051",
                          "ef-2.ef-headless:50051"));
  EXPECT_THAT(StatefulSetReplicaAddresses("ef", "ef", 7, 1, "prod"),
              ElementsAre("ef-0.ef.prod:7"));
}

TEST(RoutingClientCreateTest, ImpossibleConfigurationsAreRefused) {
  std::vector<std::unique_ptr<ExposureFilterClient>> none;
  EXPECT_EQ(RoutingClient::Create(12, std::move(none)).status().code(),
            absl::StatusCode::kInvalidArgument);
  RoutingOptions o;
  o.partitions = 0;
  o.replica_addresses = {"127.0.0.1:1"};
  EXPECT_THAT(
      std::string(RoutingClient::Connect(o, grpc::InsecureChannelCredentials())
                      .status()
                      .message()),
      HasSubstr("partitions"));
  o.partitions = 1;
  o.replica_addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  EXPECT_THAT(
      std::string(RoutingClient::Connect(o, grpc::InsecureChannelCredentials())
                      .status()
                      .message()),
      HasSubstr("exceed partitions=1"));
}

TEST_F(RoutingClientTest, RoutedCallsForRandomUsersAllSucceed) {
  const std::vector<std::string> users = RandomUsers(300, 7);
  const RoutedRecordResult written = router_->RecordExposure(Batch(users));
  ASSERT_TRUE(written.status().ok()) << written.status();
  EXPECT_EQ(written.items_recorded, 2 * users.size());
  // One RPC per owner; every replica got some of 300 random users.
  ASSERT_EQ(written.owners.size(), 3u);
  for (const OwnerWrite& w : written.owners) {
    for (int i : w.exposures) {
      EXPECT_EQ(ReplicaForUser(users[i], kPartitions, kReplicas), w.replica);
    }
  }
  for (size_t i = 0; i < users.size(); ++i) {
    auto r = router_->FilterRecalled(Recall(users[i], 1000 + i));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->kept_ids(), ElementsAre(1)) << users[i];
  }
  // Each replica holds exactly its own users.
  auto stats = router_->GetServerStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  uint64_t total = 0;
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_EQ((*stats)[r].replica_ordinal(), static_cast<uint32_t>(r));
    EXPECT_EQ((*stats)[r].users(), written.owners[r].exposures.size());
    total += (*stats)[r].users();
  }
  EXPECT_EQ(total, users.size());
}

TEST_F(RoutingClientTest, DirectCallsToAWrongReplicaAreFailedPrecondition) {
  const std::vector<std::string> users = RandomUsers(60, 11);
  ASSERT_TRUE(router_->RecordExposure(Batch(users)).status().ok());
  for (size_t i = 0; i < users.size(); ++i) {
    const int32_t owner = router_->ReplicaForUser(users[i]);
    const int32_t wrong = (owner + 1 + static_cast<int32_t>(i % 2)) % kReplicas;
    auto r = router_->ClientForReplica(wrong).FilterRecalled(
        Recall(users[i], 1000 + i));
    ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    std::optional<OwnerHint> hint = OwnerHint::FromStatus(r.status());
    ASSERT_TRUE(hint.has_value()) << r.status();
    EXPECT_EQ(hint->ordinal, owner);
    EXPECT_EQ(hint->self, wrong);
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr(absl::StrCat("owned by replica ", owner)));
  }
}

TEST_F(RoutingClientTest, PullModeCachesEachUsersFilterFromItsOwner) {
  const std::vector<std::string> users = RandomUsers(30, 5);
  ASSERT_TRUE(router_->RecordExposure(Batch(users)).status().ok());
  RoutingFilterCache cache(router_.get(), {});
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < users.size(); ++i) {
      auto f = cache.Get("homefeed", users[i]);
      ASSERT_TRUE(f.ok()) << f.status();
      EXPECT_TRUE((*f)->view().MayContainId(1000 + i));
    }
  }
  EXPECT_EQ(cache.stats().full_pulls, users.size());
  EXPECT_EQ(cache.stats().not_modified, users.size());
}

TEST_F(RoutingClientTest, DeleteAndExplainGoToTheOwner) {
  const std::vector<std::string> users = RandomUsers(20, 3);
  ASSERT_TRUE(router_->RecordExposure(Batch(users)).status().ok());
  for (size_t i = 0; i < users.size(); ++i) {
    exposure::v1::ExplainRequest ex;
    ex.set_surface("homefeed");
    ex.set_user_id(users[i]);
    ex.add_item_ids(1000 + i);
    auto why = router_->Explain(ex);
    ASSERT_TRUE(why.ok()) << why.status();
    EXPECT_TRUE(why->items(0).filtered());
    exposure::v1::DeleteUserRequest del;
    del.set_surface("homefeed");
    del.set_user_id(users[i]);
    auto gone = router_->DeleteUser(del);
    ASSERT_TRUE(gone.ok()) << gone.status();
    EXPECT_TRUE(gone->existed());
  }
}

TEST_F(RoutingClientTest, AClientWithAnotherPartitionCountIsToldSo) {
  // Same replicas, P = 8 instead of 12: some users land on a wrong replica.
  // (Not P = 6: when N divides P, owner = (h % P) % N = h % N whatever P.)
  std::unique_ptr<RoutingClient> wrong = Router(8, addresses_);
  ASSERT_NE(wrong, nullptr);
  int diagnosed = 0;
  for (const std::string& user : RandomUsers(100, 13)) {
    auto r = wrong->FilterRecalled(Recall(user, 1000));
    if (r.ok()) continue;  // P = 8 and 12 happen to agree on this user
    ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("routing misconfigured: this client routes with "
                          "partitions=8 replicas=3 but the server at "
                          "replica_addresses["));
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("--partitions=12 --replicas=3"));
    ++diagnosed;
  }
  EXPECT_GT(diagnosed, 0);
}

TEST_F(RoutingClientTest, AddressesOutOfOrdinalOrderAreDiagnosed) {
  std::unique_ptr<RoutingClient> swapped =
      Router(kPartitions, {addresses_[1], addresses_[0], addresses_[2]});
  ASSERT_NE(swapped, nullptr);
  for (const std::string& user : RandomUsers(50, 17)) {
    const int32_t owner = swapped->ReplicaForUser(user);
    auto r = swapped->FilterRecalled(Recall(user, 1000));
    if (owner == 2) {
      EXPECT_TRUE(r.ok()) << r.status();
      continue;
    }
    ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr(absl::StrCat("replica_addresses[", owner,
                                       "] reaches replica ", 1 - owner,
                                       "; list the addresses in ordinal "
                                       "order")));
  }
}

TEST_F(RoutingClientTest, ABatchWithAnOwnerDownReportsPerOwnerStatuses) {
  const std::vector<std::string> users = RandomUsers(90, 23);
  servers_[1]->Shutdown();
  RoutingOptions o;
  o.partitions = kPartitions;
  o.replica_addresses = addresses_;
  o.client = TestOptions();
  o.client.max_attempts = 1;
  // Replica 1 refuses the connection at once (no wait_for_ready), so the
  // deadline only bounds the live owners' calls: generous for sanitizer
  // builds on a loaded machine.
  o.client.deadline = absl::Seconds(30);
  auto router = RoutingClient::Connect(o, grpc::InsecureChannelCredentials());
  ASSERT_TRUE(router.ok());
  const RoutedRecordResult result = (*router)->RecordExposure(Batch(users));
  ASSERT_EQ(result.owners.size(), 3u);
  EXPECT_TRUE(result.owners[0].status.ok()) << result.owners[0].status;
  EXPECT_EQ(result.owners[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(result.owners[1].status.message()),
              HasSubstr("replica 1 ("));
  EXPECT_TRUE(result.owners[2].status.ok()) << result.owners[2].status;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(result.FailedExposures(), result.owners[1].exposures);
  EXPECT_EQ(result.items_recorded, 2 * (result.owners[0].exposures.size() +
                                        result.owners[2].exposures.size()));
  // The owners that answered hold their users.
  for (int i : result.owners[2].exposures) {
    auto r = (*router)->FilterRecalled(Recall(users[i], 1000 + i));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->kept_ids(), ElementsAre(1));
  }
}

}  // namespace
}  // namespace exposure_filter
