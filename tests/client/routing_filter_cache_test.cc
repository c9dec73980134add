// RoutingFilterCache (pull mode through a RoutingClient) against an
// in-process replicated cluster (N = 3, R = 2, P = 6, librdkafka's mock
// cluster: tests/ingest's fixture). A copy is made to stop applying the log
// by its disk refusing the write-ahead log, as in lagging_reads_test.cc.
// With owner 0 gone the held filter is revalidated at owner 1 (same bytes,
// same version); with both owners lagging the last owner's try gives the
// least-stale answer and says so; with read-your-writes a Get after the
// client's own write is answered by a copy that applied it, never by the
// cached copy that predates it, and a copy that has not applied it refuses
// even on the last try. Waits poll with generous deadlines; nothing is
// timed.
#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/filter_cache.h"
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

// The fixture's default surface: the one Recall() reads.
constexpr char kSurface[] = "";

class RoutingFilterCacheTest : public ReplicatedClusterTest {
 protected:
  // Starts the replicas with `max_serving_lag`, each data dir writing
  // through disks_[ordinal]; the user's owners are replicas 0 and 1.
  void Start(absl::Duration max_serving_lag) {
    edit_config_ = [this, max_serving_lag](ServerConfig* c) {
      c->max_serving_lag = max_serving_lag;
      c->durability.disk_io = &disks_[c->cluster.replica_ordinal];
    };
    StartAll();
    user_ = UserOwnedBy("pull-", 0, 1);
    owners_ = OwnersOfUser(user_, kPartitions, kReplicas, kReplication);
    partition_ = KafkaPartitionForKey(user_, kPartitions);
  }

  void TearDown() override {
    for (FaultyDiskIo& d : disks_) d.Heal();
    ReplicatedClusterTest::TearDown();
  }

  std::unique_ptr<RoutingClient> Router(bool read_your_writes) {
    auto router = RoutingClient::Connect(
        ClusterRoutingOptions(servers_, read_your_writes),
        grpc::InsecureChannelCredentials());
    EXPECT_TRUE(router.ok()) << router.status();
    return router.ok() ? *std::move(router) : nullptr;
  }

  absl::Status Write(const RoutingClient& router, uint64_t item) const {
    exposure::v1::RecordExposureRequest req;
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user_);
    e->add_item_ids(item);
    return router.RecordExposure(req).status();
  }

  // Waits until both owners hold `item` for the user.
  void WaitBothApplied(uint64_t item) {
    for (int32_t r : owners_) {
      bool removed = false;
      ASSERT_TRUE(WaitFor([&] {
        return Recall(r, user_, item, &removed).ok() && removed;
      })) << "replica "
          << r << " never applied item " << item;
    }
  }

  // Replica r applies nothing more: its disk refuses the write-ahead log,
  // so its consumer stalls on the next message of the log.
  void Stall(int32_t r) { disks_[r].FailWrites("wal-", ENOSPC); }

  // Waits until replica r stops serving fresh reads (lag past its bound).
  void WaitNotServing(int32_t r) {
    ASSERT_TRUE(WaitFor([&] { return !servers_[r]->readiness().serving(); }))
        << r;
  }

  FaultyDiskIo disks_[kReplicas];
  std::string user_;
  std::vector<int32_t> owners_;
  int32_t partition_ = -1;
};

TEST_F(RoutingFilterCacheTest,
       OwnerZeroGoneRevalidatesTheHeldFilterAtOwnerOne) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(1)));
  std::unique_ptr<RoutingClient> router = Router(false);
  ASSERT_TRUE(Write(*router, 7).ok());
  ASSERT_NO_FATAL_FAILURE(WaitBothApplied(7));
  RoutingFilterCache cache(router.get(), {});
  auto held = cache.Get(kSurface, user_);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE((*held)->view().MayContainId(7));
  EXPECT_EQ(router->stats().failovers, 0u);

  servers_[owners_[0]].reset();
  exposure::v1::ReadStaleness staleness;
  auto again = cache.Get(kSurface, user_, &staleness);
  ASSERT_TRUE(again.ok()) << again.status();
  // Owner 1 holds the same writes, so the same bytes and version: it
  // answered "not modified" to the version pulled from owner 0.
  EXPECT_EQ(*again, *held);
  EXPECT_EQ(staleness.partition(), partition_);
  EXPECT_FALSE(staleness.lagging());
  const FilterCacheStats s = cache.stats();
  EXPECT_EQ(s.full_pulls, 1u);
  EXPECT_EQ(s.not_modified, 1u);
  EXPECT_EQ(s.errors, 0u);
  const RoutingStats rs = router->stats();
  EXPECT_EQ(rs.failovers, 1u);
  EXPECT_EQ(rs.replica_errors[owners_[0]], 1u);
}

TEST_F(RoutingFilterCacheTest, BothOwnersLaggingGiveTheLeastStaleAnswer) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(1)));
  std::unique_ptr<RoutingClient> router = Router(false);
  ASSERT_TRUE(Write(*router, 1).ok());
  ASSERT_NO_FATAL_FAILURE(WaitBothApplied(1));
  for (int32_t r : owners_) Stall(r);
  ASSERT_TRUE(Write(*router, 2).ok());
  for (int32_t r : owners_) ASSERT_NO_FATAL_FAILURE(WaitNotServing(r));

  RoutingFilterCache cache(router.get(), {});
  exposure::v1::ReadStaleness staleness;
  auto pulled = cache.Get(kSurface, user_, &staleness);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_TRUE((*pulled)->view().MayContainId(1));
  EXPECT_TRUE(staleness.lagging());
  EXPECT_EQ(staleness.partition(), partition_);
  // Revalidated: lagging again, from the cache.
  auto revalidated = cache.Get(kSurface, user_, &staleness);
  ASSERT_TRUE(revalidated.ok()) << revalidated.status();
  EXPECT_EQ(*revalidated, *pulled);
  EXPECT_TRUE(staleness.lagging());
  const FilterCacheStats s = cache.stats();
  EXPECT_EQ(s.full_pulls, 1u);
  EXPECT_EQ(s.not_modified, 1u);
  EXPECT_EQ(s.lagging_answers, 2u);
  EXPECT_EQ(s.errors, 0u);
  // Owner 0 refused each time; the last owner answered past its bound.
  EXPECT_EQ(router->stats().failovers, 2u);
  EXPECT_EQ(router->stats().lagging_answers, 2u);
}

TEST_F(RoutingFilterCacheTest, AGetAfterTheUsersWriteIsAnsweredByACopyWithIt) {
  // Owner 0 keeps serving (a bound far above the test's length) while it
  // applies nothing: without tokens it answers from before the write.
  ASSERT_NO_FATAL_FAILURE(Start(absl::Hours(1)));
  std::unique_ptr<RoutingClient> router = Router(true);
  std::unique_ptr<RoutingClient> tokenless = Router(false);
  ASSERT_TRUE(Write(*router, 1).ok());
  ASSERT_NO_FATAL_FAILURE(WaitBothApplied(1));
  RoutingFilterCache cache(router.get(), {});
  RoutingFilterCache control(tokenless.get(), {});
  auto before = cache.Get(kSurface, user_);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(control.Get(kSurface, user_).ok());

  Stall(owners_[0]);
  ASSERT_TRUE(Write(*router, 2).ok());
  ASSERT_TRUE(router->WrittenOffset(user_).has_value());
  // The control: owner 0 answers "not modified" to the filter held from
  // before the write, so a revalidation without the token serves it.
  auto stale = control.Get(kSurface, user_);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ((*stale)->version(), (*before)->version());
  EXPECT_EQ(control.stats().not_modified, 1u);

  // With the token owner 0 refuses; until owner 1 has applied the write
  // Get fails UNAVAILABLE (told, never the held copy), then owner 1
  // answers with the write.
  absl::StatusOr<std::shared_ptr<const PulledFilter>> after;
  ASSERT_TRUE(WaitFor([&] {
    after = cache.Get(kSurface, user_);
    EXPECT_TRUE(after.ok() || absl::IsUnavailable(after.status()))
        << after.status();
    return after.ok();
  })) << after.status();
  EXPECT_TRUE((*after)->view().MayContainId(2));
  EXPECT_NE((*after)->version(), (*before)->version());
  const FilterCacheStats s = cache.stats();
  EXPECT_EQ(s.full_pulls, 2u);
  EXPECT_EQ(s.not_modified, 0u);
  const RoutingStats rs = router->stats();
  EXPECT_GE(rs.reads_with_offsets, 2u);
  EXPECT_GE(rs.replica_errors[owners_[0]], 1u);
}

TEST_F(RoutingFilterCacheTest, MinOffsetsHoldOnTheLastOwnersTry) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(1)));
  std::unique_ptr<RoutingClient> router = Router(true);
  std::unique_ptr<RoutingClient> tokenless = Router(false);
  ASSERT_TRUE(Write(*router, 1).ok());
  ASSERT_NO_FATAL_FAILURE(WaitBothApplied(1));
  RoutingFilterCache cache(router.get(), {});
  RoutingFilterCache control(tokenless.get(), {});
  ASSERT_TRUE(cache.Get(kSurface, user_).ok());
  ASSERT_TRUE(control.Get(kSurface, user_).ok());

  for (int32_t r : owners_) Stall(r);
  ASSERT_TRUE(Write(*router, 2).ok());
  for (int32_t r : owners_) ASSERT_NO_FATAL_FAILURE(WaitNotServing(r));
  // The control: the last owner's try answers, lagging, without item 2.
  exposure::v1::ReadStaleness staleness;
  ASSERT_TRUE(control.Get(kSurface, user_, &staleness).ok());
  EXPECT_TRUE(staleness.lagging());

  // No copy has applied the write: allow_lagging relaxes the lag bound
  // only, so every owner refuses and the held filter is not served.
  auto refused = cache.Get(kSurface, user_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
      << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(absl::StrCat("min_offsets[", partition_, "]")));
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("every owner failed (2 of 2 tried)"));
  const FilterCacheStats s = cache.stats();
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.lagging_answers, 0u);
}

}  // namespace
}  // namespace exposure_filter
