// RoutingFilterReplica against an in-process replicated cluster (N = 3,
// R = 2, P = 6, librdkafka's mock cluster: tests/ingest's fixture): checks
// are answered by owner 0's local copy; when owner 0's server goes away the
// user moves to owner 1, resubscribed with the version held, and no check
// misses a written item meanwhile (pushed ones included); with read-your-writes
// a check right after the client's own write never misses it.
#include "exposure_filter/routing_filter_replica.h"

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/partitioning.h"
#include "exposure_filter/routing_client.h"
#include "gtest/gtest.h"
#include "tests/ingest/replicated_cluster_routing.h"
#include "tests/ingest/replicated_cluster_test_base.h"

namespace exposure_filter {
namespace {

class RoutingFilterReplicaTest : public ReplicatedClusterTest {
 protected:
  std::unique_ptr<RoutingClient> Router(bool read_your_writes) {
    auto router = RoutingClient::Connect(
        ClusterRoutingOptions(servers_, read_your_writes),
        grpc::InsecureChannelCredentials());
    EXPECT_TRUE(router.ok()) << router.status();
    return router.ok() ? *std::move(router) : nullptr;
  }

  std::unique_ptr<RoutingFilterReplica> Replica(const RoutingClient* router) {
    FilterReplicaOptions o;
    o.deadline = absl::Seconds(20);
    o.max_staleness = absl::Seconds(5);
    o.ping_interval = absl::Milliseconds(20);
    auto r = RoutingFilterReplica::Create(router, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }

  static absl::Status Write(const RoutingClient& router,
                            const std::string& user, uint64_t item) {
    exposure::v1::RecordExposureRequest req;
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(item);
    return router.RecordExposure(req).status();
  }

  // Checks items[0..n) (and a never-written item) for `user`: *missed
  // counts the written ones kept.
  static absl::Status CheckAll(RoutingFilterReplica& replica,
                               const std::string& user,
                               const std::vector<uint64_t>& written,
                               int* missed, CheckPath* path,
                               int32_t* served_by) {
    std::vector<uint64_t> ids = written;
    ids.push_back(999'999);
    std::vector<uint8_t> keep(ids.size());
    absl::Status s =
        replica.Check("", user, ids, {}, keep.data(), path, served_by);
    *missed = 0;
    for (size_t i = 0; i < written.size(); ++i) *missed += keep[i];
    if (s.ok() && keep.back() != 1) {
      return absl::InternalError("a never-written item was removed");
    }
    return s;
  }
};

TEST_F(RoutingFilterReplicaTest, ChecksAreLocalOnOwnerZero) {
  StartAll();
  const std::string user = UserOwnedBy("a-", 0, 1);
  const int32_t owner0 =
      OwnersOfUser(user, kPartitions, kReplicas, kReplication)[0];
  std::unique_ptr<RoutingClient> router = Router(false);
  std::unique_ptr<RoutingFilterReplica> replica = Replica(router.get());
  ASSERT_TRUE(Write(*router, user, 7).ok());
  int missed = 1;
  CheckPath path = CheckPath::kUnary;
  int32_t served_by = -1;
  // The write reaches the copies through the log: wait for owner 0's.
  ASSERT_TRUE(WaitFor([&] {
    return CheckAll(*replica, user, {7}, &missed, &path, &served_by).ok() &&
           missed == 0 && path == CheckPath::kLocal;
  }));
  EXPECT_EQ(served_by, owner0);
  const RoutingReplicaStats s = replica->stats();
  EXPECT_EQ(s.moves, 0u);
  EXPECT_EQ(s.replicas[owner0].users_held, 1u);
  EXPECT_EQ(s.failed_checks, 0u);
}

TEST_F(RoutingFilterReplicaTest, OwnerGoneMovesTheUserWithItsVersion) {
  StartAll();
  const std::string user = UserOwnedBy("b-", 0, 1);
  const std::vector<int32_t> owners =
      OwnersOfUser(user, kPartitions, kReplicas, kReplication);
  std::unique_ptr<RoutingClient> router = Router(false);
  std::unique_ptr<RoutingFilterReplica> replica = Replica(router.get());
  const std::vector<uint64_t> written = {11, 12, 13};
  for (uint64_t item : written) ASSERT_TRUE(Write(*router, user, item).ok());
  // Both copies hold every write before owner 0 goes (the log's copies
  // apply on their own): what is asserted below is the move, not lag.
  bool removed = false;
  for (int32_t o : owners) {
    ASSERT_TRUE(WaitFor([&] {
      return Recall(o, user, written.back(), &removed).ok() && removed;
    }));
  }
  int missed = 1;
  CheckPath path = CheckPath::kUnary;
  int32_t served_by = -1;
  ASSERT_TRUE(WaitFor([&] {
    return CheckAll(*replica, user, written, &missed, &path, &served_by).ok() &&
           path == CheckPath::kLocal;
  }));
  ASSERT_EQ(missed, 0);
  ASSERT_EQ(served_by, owners[0]);

  // Owner 0's server goes away: its stream ends.
  servers_[owners[0]].reset();
  // Every check from now on answers, and misses nothing: mode A through
  // the router (failed over to owner 1) until owner 1's copy is synced.
  bool local_on_next = false;
  const absl::Time until = absl::Now() + kPatience;
  int checks = 0;
  while (!local_on_next && absl::Now() < until) {
    const absl::Status s =
        CheckAll(*replica, user, written, &missed, &path, &served_by);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(missed, 0) << "check " << checks;
    ++checks;
    local_on_next = path == CheckPath::kLocal && served_by == owners[1];
    if (path == CheckPath::kLocal) {
      EXPECT_EQ(served_by, owners[1]);
    }
  }
  ASSERT_TRUE(local_on_next);
  const RoutingReplicaStats s = replica->stats();
  EXPECT_EQ(s.moves, 1u);
  EXPECT_EQ(s.failed_checks, 0u);
  EXPECT_EQ(s.replicas[owners[0]].users_held, 0u);
  EXPECT_EQ(s.replicas[owners[1]].users_held, 1u);
  // The subscribe carried the version owner 0's snapshot had, which is
  // owner 1's too (same writes, same bytes): no filter was sent again.
  EXPECT_EQ(s.replicas[owners[1]].not_modified, 1u);
  EXPECT_EQ(s.replicas[owners[1]].snapshots, 1u);
}

TEST_F(RoutingFilterReplicaTest, OwnerGoneLosesNoPushedItem) {
  StartAll();
  const std::string user = UserOwnedBy("e-", 0, 1);
  const std::vector<int32_t> owners =
      OwnersOfUser(user, kPartitions, kReplicas, kReplication);
  std::unique_ptr<RoutingClient> router = Router(false);
  std::unique_ptr<RoutingFilterReplica> replica = Replica(router.get());
  std::vector<uint64_t> written = {31};
  ASSERT_TRUE(Write(*router, user, 31).ok());
  int missed = 1;
  CheckPath path = CheckPath::kUnary;
  int32_t served_by = -1;
  ASSERT_TRUE(WaitFor([&] {
    return CheckAll(*replica, user, written, &missed, &path, &served_by).ok() &&
           missed == 0 && path == CheckPath::kLocal;
  }));
  // Items that reach owner 0's replica as pushes, not in the snapshot it
  // holds: the copy that moves to owner 1 lacks them, so owner 1 must not
  // be trusted before its own snapshot.
  for (uint64_t item : {32, 33, 34}) {
    ASSERT_TRUE(Write(*router, user, item).ok());
    written.push_back(item);
  }
  bool removed = false;
  for (int32_t o : owners) {
    ASSERT_TRUE(
        WaitFor([&] { return Recall(o, user, 34, &removed).ok() && removed; }));
  }
  ASSERT_TRUE(WaitFor([&] {
    return CheckAll(*replica, user, written, &missed, &path, &served_by).ok() &&
           missed == 0 && path == CheckPath::kLocal;
  }));
  ASSERT_GE(replica->stats().replicas[owners[0]].pushes, 1u);
  servers_[owners[0]].reset();
  bool local_on_next = false;
  const absl::Time until = absl::Now() + kPatience;
  for (int checks = 0; !local_on_next && absl::Now() < until; ++checks) {
    const absl::Status s =
        CheckAll(*replica, user, written, &missed, &path, &served_by);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(missed, 0) << "check " << checks;
    local_on_next = path == CheckPath::kLocal && served_by == owners[1];
  }
  ASSERT_TRUE(local_on_next);
  // The kill's move at least. On a loaded machine the user may also have
  // moved before it: a first check while the stream to owner 0 has no pong
  // yet is served by owner 1, and the next by owner 0 (a move), as is a
  // copy that reports itself lagging past --max_serving_lag. Every check
  // above, across any move, missed nothing.
  EXPECT_GE(replica->stats().moves, 1u);
}

TEST_F(RoutingFilterReplicaTest, BrokenStreamResyncsWithoutAMiss) {
  StartAll();
  const std::string user = UserOwnedBy("c-", 1, 2);
  const std::vector<int32_t> owners =
      OwnersOfUser(user, kPartitions, kReplicas, kReplication);
  std::unique_ptr<RoutingClient> router = Router(false);
  std::unique_ptr<RoutingFilterReplica> replica = Replica(router.get());
  std::vector<uint64_t> written = {21};
  ASSERT_TRUE(Write(*router, user, 21).ok());
  int missed = 1;
  CheckPath path = CheckPath::kUnary;
  int32_t served_by = -1;
  ASSERT_TRUE(WaitFor([&] {
    return CheckAll(*replica, user, written, &missed, &path, &served_by).ok() &&
           missed == 0 && path == CheckPath::kLocal;
  }));
  // The stream breaks (the server lives on): the user is not synced on
  // any replica until a snapshot; more writes land meanwhile.
  replica->ReplicaFor(owners[0]).Reconnect();
  for (uint64_t item : {22, 23}) {
    ASSERT_TRUE(Write(*router, user, item).ok());
    written.push_back(item);
  }
  // Wait until both copies applied them, then no check may miss them.
  bool removed = false;
  for (int32_t o : owners) {
    ASSERT_TRUE(
        WaitFor([&] { return Recall(o, user, 23, &removed).ok() && removed; }));
  }
  for (int i = 0; i < 50; ++i) {
    const absl::Status s =
        CheckAll(*replica, user, written, &missed, &path, &served_by);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(missed, 0) << "check " << i;
  }
  EXPECT_EQ(replica->stats().failed_checks, 0u);
}

TEST_F(RoutingFilterReplicaTest, ReadYourWritesNeverMissesOwnWrite) {
  StartAll();
  const std::string user = UserOwnedBy("d-", 2, 0);
  std::unique_ptr<RoutingClient> router = Router(true);
  std::unique_ptr<RoutingFilterReplica> replica = Replica(router.get());
  std::vector<uint64_t> written;
  int missed = 1;
  CheckPath path = CheckPath::kUnary;
  int32_t served_by = -1;
  // Each check right after its write, before the copies may have applied
  // it: answered by a copy that did (min_offsets), never from one that
  // did not. While no owner has applied it the check fails UNAVAILABLE
  // (the RoutingClient's read-your-writes: told, never a silent miss), and
  // is retried.
  for (uint64_t item = 100; item < 120; ++item) {
    ASSERT_TRUE(Write(*router, user, item).ok());
    written.push_back(item);
    absl::Status s;
    ASSERT_TRUE(WaitFor([&] {
      s = CheckAll(*replica, user, written, &missed, &path, &served_by);
      EXPECT_TRUE(s.ok() || absl::IsUnavailable(s)) << s;
      EXPECT_TRUE(!s.ok() || missed == 0) << "after writing " << item;
      return s.ok();
    })) << s;
  }
  // With no new write, the copy once confirmed answers locally.
  ASSERT_TRUE(WaitFor([&] {
    return CheckAll(*replica, user, written, &missed, &path, &served_by).ok() &&
           missed == 0 && path == CheckPath::kLocal;
  }));
  const RoutingReplicaStats s = replica->stats();
  // Every check right after its write went to mode A: not yet confirmed
  // on the serving owner, or (on a loaded machine, a pong late) no owner's
  // stream serving at all.
  EXPECT_GE(s.unconfirmed_writes + s.no_owner_serving, 20u);
  EXPECT_GE(s.local_checks, 1u);
}

}  // namespace
}  // namespace exposure_filter
