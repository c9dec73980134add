// RoutingClient failover and hedging against three scripted
// fake replicas (P = 12, N = 3): with R = 2 a user of owner 0 = replica 0 has
// owners {0, 1}. One owner answering UNAVAILABLE, one hanging past the
// per-try timeout, one unreachable port: the call succeeds on the other
// owner inside its deadline. Hedging sends to owner 1 after the delay; both
// owners down is UNAVAILABLE naming both; R = 1 is unchanged; other codes are
// final unless an owner hint changes the placement; the last owner's try
// lets a lagging copy answer; RoutingFilterCache's pulls take the same
// path. No wall-clock asserts:
// which replica was called, and the codes, say what happened.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exposure_filter/partitioning.h"
#include "exposure_filter/routing_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/filter/filter_encoder.h"
#include "src/filter/filter_policy.h"
#include "tests/client/fake_exposure_filter_service.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int32_t kPartitions = 12;
constexpr int kReplicas = 3;

class RoutingFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < kReplicas; ++r) {
      fakes_.push_back(std::make_unique<FakeExposureFilterService>());
      int port = 0;
      grpc::ServerBuilder builder;
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                               &port);
      builder.RegisterService(fakes_.back().get());
      servers_.push_back(builder.BuildAndStart());
      ASSERT_NE(servers_.back(), nullptr);
      addresses_.push_back(absl::StrCat("127.0.0.1:", port));
    }
    // A user whose owner 0 is replica 0 (its owner 1 is then replica 1).
    for (int i = 0; user_.empty(); ++i) {
      const std::string u = absl::StrCat("user:", i);
      if (ReplicaForUser(u, kPartitions, kReplicas) == 0) user_ = u;
    }
  }

  void TearDown() override {
    for (auto& f : fakes_) {
      f->hold = false;
      if (!f->release.HasBeenNotified()) f->release.Notify();
    }
    for (auto& s : servers_) {
      if (s != nullptr) s->Shutdown();
    }
  }

  // One try per channel call (no gRPC retries) unless a test says otherwise;
  // a deadline generous for sanitizer builds on a loaded machine.
  RoutingOptions Options(int32_t replication_factor) {
    RoutingOptions o;
    o.partitions = kPartitions;
    o.replica_addresses = addresses_;
    o.replication_factor = replication_factor;
    o.client.deadline = absl::Seconds(30);
    o.client.max_attempts = 1;
    return o;
  }

  std::unique_ptr<RoutingClient> Router(const RoutingOptions& o) {
    auto router = RoutingClient::Connect(o, grpc::InsecureChannelCredentials());
    EXPECT_TRUE(router.ok()) << router.status();
    return router.ok() ? *std::move(router) : nullptr;
  }

  exposure::v1::FilterRecalledRequest Recall() const {
    exposure::v1::FilterRecalledRequest req;
    req.set_surface("homefeed");
    req.set_user_id(user_);
    req.add_candidate_ids(7);
    return req;
  }

  void FailAlways(int replica, grpc::StatusCode code) {
    fakes_[replica]->fail_first = 1 << 30;
    fakes_[replica]->fail_code = code;
  }

  // Owner 0 always answers `code`: the call fails over once and owner 1
  // answers it.
  void ExpectFailoverToOwnerOneOn(grpc::StatusCode code) {
    FailAlways(0, code);
    auto router = Router(Options(2));
    auto r = router->FilterRecalled(Recall());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(fakes_[0]->calls, 1);
    EXPECT_EQ(fakes_[1]->calls, 1);
    EXPECT_EQ(router->stats().failovers, 1u);
  }

  std::vector<std::unique_ptr<FakeExposureFilterService>> fakes_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<std::string> addresses_;
  std::string user_;
};

TEST_F(RoutingFailoverTest, OwnersAreTheUsersPartitionAndTheNextOrdinals) {
  auto router = Router(Options(2));
  ASSERT_NE(router, nullptr);
  EXPECT_THAT(router->OwnersForUser(user_), ElementsAre(0, 1));
  EXPECT_THAT(Router(Options(3))->OwnersForUser(user_), ElementsAre(0, 1, 2));
}

TEST_F(RoutingFailoverTest, AnUnavailableOwnerFailsOverToTheNext) {
  FailAlways(0, grpc::StatusCode::UNAVAILABLE);
  auto router = Router(Options(2));
  auto r = router->FilterRecalled(Recall());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->kept_ids(), ElementsAre(7));
  EXPECT_EQ(fakes_[0]->calls, 1);
  EXPECT_EQ(fakes_[1]->calls, 1);
  EXPECT_EQ(fakes_[2]->calls, 0);
  const RoutingStats s = router->stats();
  EXPECT_EQ(s.failovers, 1u);
  EXPECT_EQ(s.hedges, 0u);
  EXPECT_THAT(s.replica_errors, ElementsAre(1, 0, 0));
}

// What a server shutting down answers a call that just arrived (gRPC
// cancels it); seen in the failover drill 0 ms after a SIGTERM.
TEST_F(RoutingFailoverTest, ACallCancelledByTheOwnerFailsOverToTheNext) {
  ExpectFailoverToOwnerOneOn(grpc::StatusCode::CANCELLED);
}

// DEADLINE_EXCEEDED answered while the call has time left (a proxy's own
// timeout, not the call's deadline) fails over like UNAVAILABLE; only one
// that ends the call's own deadline stops the call
// (TheDeadlineIsNotExtendedByFailover).
TEST_F(RoutingFailoverTest, ADeadlineExceededWithTimeLeftFailsOverToTheNext) {
  ExpectFailoverToOwnerOneOn(grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(RoutingFailoverTest, AHealthyOwnerZeroIsTheOnlyOneCalled) {
  auto router = Router(Options(2));
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(router->FilterRecalled(Recall()).ok());
  EXPECT_EQ(fakes_[0]->calls, 5);
  EXPECT_EQ(fakes_[1]->calls, 0);
  EXPECT_EQ(router->stats().failovers, 0u);
}

TEST_F(RoutingFailoverTest, AHangingOwnerIsLeftAfterThePerTryTimeout) {
  fakes_[0]->hold = true;
  RoutingOptions o = Options(2);
  o.failover.per_try_timeout = absl::Milliseconds(200);
  auto router = Router(o);
  auto r = router->FilterRecalled(Recall());
  // OK at all means inside the 30 s deadline; owner 0 never answers.
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(fakes_[1]->calls, 1);
  EXPECT_EQ(router->stats().failovers, 1u);
  EXPECT_THAT(router->stats().replica_errors, ElementsAre(1, 0, 0));
}

// Pull mode goes through the router's GetFilter: a hanging owner 0 is
// left after the per-try timeout and owner 1's filter is served.
TEST_F(RoutingFailoverTest, TheFilterCacheLeavesAHangingOwnerAfterItsTry) {
  absl::StatusOr<FilterPolicy> policy = FilterPolicy::Create({});
  ASSERT_TRUE(policy.ok()) << policy.status();
  std::string bytes;
  const std::string version =
      FilterVersionString(EncodeFilter(nullptr, *policy, 0, &bytes));
  // Set before any call reaches the fakes.
  for (auto& f : fakes_) {
    f->get_filter_answer.set_filter(bytes);
    f->get_filter_answer.set_version(version);
  }
  fakes_[0]->hold = true;
  RoutingOptions o = Options(2);
  o.failover.per_try_timeout = absl::Milliseconds(200);
  auto router = Router(o);
  RoutingFilterCache cache(router.get(), {});
  auto f = cache.Get("homefeed", user_);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), version);
  EXPECT_EQ(fakes_[1]->calls, 1);
  EXPECT_EQ(router->stats().failovers, 1u);
  EXPECT_EQ(cache.stats().full_pulls, 1u);
}

TEST_F(RoutingFailoverTest, AnUnreachableOwnerFailsOverToTheNext) {
  servers_[0]->Shutdown();
  servers_[0].reset();  // nothing listens on replica 0's port any more
  auto router = Router(Options(2));
  auto r = router->FilterRecalled(Recall());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(fakes_[1]->calls, 1);
  EXPECT_EQ(router->stats().failovers, 1u);
}

TEST_F(RoutingFailoverTest, WritesFailOverAndSayWhoWroteThem) {
  FailAlways(0, grpc::StatusCode::UNAVAILABLE);
  auto router = Router(Options(2));
  exposure::v1::RecordExposureRequest req;
  req.set_surface("homefeed");
  exposure::v1::Exposure* e = req.add_exposures();
  e->set_user_id(user_);
  e->add_item_ids(7);
  const RoutedRecordResult w = router->RecordExposure(req);
  ASSERT_TRUE(w.status().ok()) << w.status();
  ASSERT_EQ(w.owners.size(), 1u);
  EXPECT_EQ(w.owners[0].replica, 0);
  EXPECT_EQ(w.owners[0].written_by, 1);
  EXPECT_EQ(fakes_[1]->calls, 1);
  EXPECT_EQ(router->stats().failovers, 1u);
}

TEST_F(RoutingFailoverTest, BothOwnersDownIsUnavailableNamingThem) {
  FailAlways(0, grpc::StatusCode::UNAVAILABLE);
  FailAlways(1, grpc::StatusCode::UNAVAILABLE);
  auto router = Router(Options(2));
  auto r = router->FilterRecalled(Recall());
  ASSERT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  const std::string m(r.status().message());
  EXPECT_THAT(m, HasSubstr("every owner failed (2 of 2 tried)"));
  EXPECT_THAT(m, HasSubstr("replica 0: UNAVAILABLE: scripted"));
  EXPECT_THAT(m, HasSubstr("replica 1: UNAVAILABLE: scripted"));
  EXPECT_EQ(fakes_[2]->calls, 0);  // not an owner
  // Owner 0 was tried once more as a last owner (it might only have been
  // lagging) and failed again.
  EXPECT_EQ(fakes_[0]->calls, 2);
  EXPECT_EQ(fakes_[1]->calls, 1);
  EXPECT_THAT(router->stats().replica_errors, ElementsAre(2, 1, 0));
}

// The last owner in placement order is down and the earlier one lags: the
// earlier one is asked again with allow_lagging, and its least-stale answer
// is the read's.
TEST_F(RoutingFailoverTest, ALaggingOwnerAnswersWhenTheLastOwnerIsDown) {
  fakes_[0]->lagging = true;
  FailAlways(1, grpc::StatusCode::UNAVAILABLE);
  auto router = Router(Options(2));
  auto r = router->FilterRecalled(Recall());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->kept_ids(), ElementsAre(7));
  EXPECT_TRUE(r->staleness().lagging());
  EXPECT_EQ(fakes_[0]->calls, 2);
  EXPECT_EQ(fakes_[0]->allow_lagging_calls, 1);
  EXPECT_EQ(fakes_[1]->calls, 1);
  const RoutingStats st = router->stats();
  EXPECT_EQ(st.lagging_answers, 1u);
  EXPECT_EQ(st.failovers, 2u);
}

// Writes are not lag-gated: no second pass re-sends them.
TEST_F(RoutingFailoverTest, AWriteIsNotRetriedAsALastResort) {
  FailAlways(0, grpc::StatusCode::UNAVAILABLE);
  FailAlways(1, grpc::StatusCode::UNAVAILABLE);
  auto router = Router(Options(2));
  exposure::v1::RecordExposureRequest req;
  req.set_surface("homefeed");
  req.add_exposures()->set_user_id(user_);
  req.mutable_exposures(0)->add_item_ids(7);
  EXPECT_EQ(router->RecordExposure(req).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(fakes_[0]->calls, 1);
  EXPECT_EQ(fakes_[1]->calls, 1);
}

TEST_F(RoutingFailoverTest, TheDeadlineIsNotExtendedByFailover) {
  // No per-try timeout: owner 0 hangs for the whole deadline, and owner 1
  // must not be tried after it (nor get a fresh deadline of its own).
  fakes_[0]->hold = true;
  RoutingOptions o = Options(2);
  o.client.deadline = absl::Milliseconds(300);
  auto router = Router(o);
  auto r = router->FilterRecalled(Recall());
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded)
      << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("reached before owners 1 were tried: replica 0: "
                        "DEADLINE_EXCEEDED"));
  EXPECT_EQ(fakes_[1]->calls, 0);
  EXPECT_EQ(router->stats().failovers, 0u);
}

TEST_F(RoutingFailoverTest, ReplicationFactorOneIsUnchanged) {
  FailAlways(0, grpc::StatusCode::UNAVAILABLE);
  auto router = Router(Options(1));
  auto r = router->FilterRecalled(Recall());
  ASSERT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "scripted");  // the owner's own error
  EXPECT_EQ(fakes_[1]->calls, 0);
  EXPECT_EQ(router->stats().failovers, 0u);
}

TEST_F(RoutingFailoverTest, OtherCodesAreNotRetriedOnAnotherOwner) {
  FailAlways(0, grpc::StatusCode::INVALID_ARGUMENT);
  auto router = Router(Options(2));
  auto r = router->FilterRecalled(Recall());
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "scripted");
  EXPECT_EQ(fakes_[1]->calls, 0);
}

TEST_F(RoutingFailoverTest, AHintWithAnotherReplicationFactorMovesOn) {
  // Owner 0 down, owner 1 says the cluster runs R = 3: replica 2 is an owner
  // too, so the call goes on there and the client adopts R = 3.
  FailAlways(0, grpc::StatusCode::UNAVAILABLE);
  FailAlways(1, grpc::StatusCode::FAILED_PRECONDITION);
  fakes_[1]->owner_hint =
      "ordinal=0;partition=0;partitions=12;replicas=3;self=1;"
      "replication_factor=3";
  auto router = Router(Options(2));
  auto r = router->FilterRecalled(Recall());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(fakes_[2]->calls, 1);
  EXPECT_EQ(router->replication_factor(), 3);
  EXPECT_EQ(router->stats().placement_updates, 1u);
}

TEST_F(RoutingFailoverTest, AHintWithTheSameReplicationFactorIsFinal) {
  FailAlways(0, grpc::StatusCode::FAILED_PRECONDITION);
  fakes_[0]->owner_hint =
      "ordinal=0;partition=0;partitions=12;replicas=3;self=0;"
      "replication_factor=2";
  auto router = Router(Options(2));
  auto r = router->FilterRecalled(Recall());
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("routing disagreement with replica 0"));
  EXPECT_EQ(fakes_[1]->calls, 0);
}

TEST_F(RoutingFailoverTest, HedgingSendsToTheNextOwnerAfterTheDelay) {
  fakes_[0]->hold = true;  // owner 0 never answers; no per-try timeout
  RoutingOptions o = Options(2);
  o.failover.hedge_delay = absl::Milliseconds(50);
  auto router = Router(o);
  auto r = router->FilterRecalled(Recall());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(fakes_[0]->calls, 1);
  EXPECT_EQ(fakes_[1]->calls, 1);
  const RoutingStats s = router->stats();
  EXPECT_EQ(s.hedges, 1u);
  EXPECT_EQ(s.failovers, 0u);
  // The losing try was cancelled, not counted as owner 0's error.
  EXPECT_THAT(s.replica_errors, ElementsAre(0, 0, 0));
}

TEST_F(RoutingFailoverTest, NoHedgeWhenOwnerZeroAnswersFirst) {
  RoutingOptions o = Options(2);
  o.failover.hedge_delay = absl::Seconds(20);
  auto router = Router(o);
  ASSERT_TRUE(router->FilterRecalled(Recall()).ok());
  EXPECT_EQ(fakes_[1]->calls, 0);
  EXPECT_EQ(router->stats().hedges, 0u);
}

TEST_F(RoutingFailoverTest, WritesAreNeverHedged) {
  fakes_[0]->hold = true;
  RoutingOptions o = Options(2);
  o.client.deadline = absl::Milliseconds(300);
  o.failover.hedge_delay = absl::Milliseconds(20);
  auto router = Router(o);
  exposure::v1::RecordExposureRequest req;
  req.set_surface("homefeed");
  req.add_exposures()->set_user_id(user_);
  req.mutable_exposures(0)->add_item_ids(7);
  EXPECT_EQ(router->RecordExposure(req).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(fakes_[1]->calls, 0);
  EXPECT_EQ(router->stats().hedges, 0u);
}

TEST_F(RoutingFailoverTest, TheLastOwnersTryLetsALaggingCopyAnswer) {
  fakes_[0]->lagging = true;
  fakes_[1]->lagging = true;
  auto router = Router(Options(2));
  const exposure::v1::FilterRecalledRequest req = Recall();
  auto r = router->FilterRecalled(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->kept_ids(), ElementsAre(7));
  EXPECT_TRUE(r->staleness().lagging());
  EXPECT_EQ(r->staleness().lag_ms(), 1300);
  // Owner 0 was asked for a fresh answer, owner 1 (the last) for any.
  EXPECT_EQ(fakes_[0]->calls, 1);
  EXPECT_EQ(fakes_[0]->allow_lagging_calls, 0);
  EXPECT_EQ(fakes_[1]->allow_lagging_calls, 1);
  EXPECT_FALSE(req.allow_lagging());
  const RoutingStats s = router->stats();
  EXPECT_EQ(s.lagging_answers, 1u);
  EXPECT_EQ(s.failovers, 1u);
}

TEST_F(RoutingFailoverTest, AHedgeToTheLastOwnerAllowsLaggingToo) {
  fakes_[0]->hold = true;  // owner 0 never answers; no per-try timeout
  fakes_[1]->lagging = true;
  RoutingOptions o = Options(2);
  o.failover.hedge_delay = absl::Milliseconds(50);
  auto router = Router(o);
  auto r = router->FilterRecalled(Recall());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->staleness().lagging());
  EXPECT_EQ(fakes_[1]->allow_lagging_calls, 1);
  EXPECT_EQ(router->stats().hedges, 1u);
}

TEST_F(RoutingFailoverTest, AFreshOwnerZeroIsNotAskedToAllowLagging) {
  auto router = Router(Options(2));
  auto r = router->FilterRecalled(Recall());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->staleness().lagging());
  EXPECT_EQ(fakes_[0]->allow_lagging_calls, 0);
  EXPECT_EQ(router->stats().lagging_answers, 0u);
}

// R = 1: the servers gate no reads, so the only try carries no flag (and
// the request is not copied for it).
TEST_F(RoutingFailoverTest, ASingleOwnerIsNotAskedToAllowLagging) {
  auto router = Router(Options(1));
  ASSERT_TRUE(router->FilterRecalled(Recall()).ok());
  EXPECT_EQ(fakes_[0]->calls, 1);
  EXPECT_EQ(fakes_[0]->allow_lagging_calls, 0);
}

TEST(RoutingFailoverOptionsTest, BadOptionsNameTheField) {
  RoutingOptions o;
  o.partitions = 12;
  o.replica_addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  o.replication_factor = 3;
  auto r = RoutingClient::Connect(o, grpc::InsecureChannelCredentials());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("replication_factor: must be 1..2"));
  o.replication_factor = 2;
  o.failover.per_try_timeout = absl::Milliseconds(-1);
  EXPECT_THAT(
      std::string(RoutingClient::Connect(o, grpc::InsecureChannelCredentials())
                      .status()
                      .message()),
      HasSubstr("failover.per_try_timeout"));
  o.failover.per_try_timeout = absl::ZeroDuration();
  o.failover.hedge_delay = absl::Milliseconds(-1);
  EXPECT_THAT(
      std::string(RoutingClient::Connect(o, grpc::InsecureChannelCredentials())
                      .status()
                      .message()),
      HasSubstr("failover.hedge_delay"));
}

}  // namespace
}  // namespace exposure_filter
