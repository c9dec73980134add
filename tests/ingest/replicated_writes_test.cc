// Replicated writes (issue 16, milestone 2) against librdkafka's mock
// cluster, three real servers in-process (P = 6, N = 3, R = 2): a
// RecordExposure or DeleteUser sent to either owner of a user is produced
// to the exposure topic, answered OK only once Kafka acknowledged it, and
// applied from the log by both owners; a write Kafka did not acknowledge
// answers UNAVAILABLE naming what was not written, and nothing acknowledged
// is lost. Waits poll with generous deadlines; nothing here measures time.
#include <grpcpp/grpcpp.h>
#include <librdkafka/rdkafka.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/partitioning.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ingest/replicated_cluster_test_base.h"

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<int32_t> Owners(const std::string& user) {
  return OwnersOfUser(user, kPartitions, kReplicas, kReplication);
}

// The first `n` users "w-<i>" whose owners are exactly {a, b} (either
// order), so one call can carry them all to either owner.
std::vector<std::string> UsersOwnedBy(int32_t a, int32_t b, int n) {
  std::vector<std::string> out;
  for (int i = 0; static_cast<int>(out.size()) < n; ++i) {
    std::string u = absl::StrCat("w-", i);
    const std::vector<int32_t> o = Owners(u);
    if ((o[0] == a && o[1] == b) || (o[0] == b && o[1] == a)) {
      out.push_back(std::move(u));
    }
  }
  return out;
}

class ReplicatedWritesTest : public ReplicatedClusterTest {
 protected:
  grpc::Status Record(int32_t r, const exposure::v1::RecordExposureRequest& req,
                      exposure::v1::RecordExposureResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    return stubs_[r]->RecordExposure(&ctx, req, resp);
  }
  grpc::Status RecordOne(int32_t r, const std::string& user, uint64_t item) {
    exposure::v1::RecordExposureRequest req;
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(item);
    exposure::v1::RecordExposureResponse resp;
    return Record(r, req, &resp);
  }
  grpc::Status Delete(int32_t r, const std::string& user) {
    exposure::v1::DeleteUserRequest req;
    req.set_user_id(user);
    exposure::v1::DeleteUserResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    return stubs_[r]->DeleteUser(&ctx, req, &resp);
  }
  // Every owner of `user` filters `item`.
  void ExpectOnEveryOwner(const std::string& user, uint64_t item) {
    ExpectAllOnEveryOwner({{user, item}});
  }
  // The same for many (user, item) pairs, waiting once for all of them (a
  // failure costs one kPatience, not one per pair), then naming each miss.
  void ExpectAllOnEveryOwner(
      const std::vector<std::pair<std::string, uint64_t>>& writes) {
    auto missing = [&] {
      std::vector<std::string> out;
      for (const auto& [user, item] : writes) {
        for (int32_t r : Owners(user)) {
          bool removed = false;
          if (!Recall(r, user, item, &removed).ok() || !removed) {
            out.push_back(
                absl::StrCat("item ", item, " of ", user, " on owner ", r));
          }
        }
      }
      return out;
    };
    WaitFor([&] { return missing().empty(); });
    for (const std::string& m : missing()) ADD_FAILURE() << "missing: " << m;
  }
  uint64_t BadMessages(int32_t r) {
    uint64_t bad = 0;
    for (uint64_t n : servers_[r]->kafka_ingest()->stats().bad_messages) {
      bad += n;
    }
    return bad;
  }
};

TEST_F(ReplicatedWritesTest, AWriteThroughEitherOwnerLandsOnBothOwners) {
  StartAll();
  // 12 users, each written through one of its owners, alternating which.
  for (int i = 0; i < 12; ++i) {
    const std::string user = absl::StrCat("user-", i);
    const int32_t via = Owners(user)[i % 2];
    exposure::v1::RecordExposureRequest req;
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(7000 + i);
    e->add_item_keys(absl::StrCat("key-", i));
    exposure::v1::RecordExposureResponse resp;
    const grpc::Status s = Record(via, req, &resp);
    ASSERT_TRUE(s.ok()) << user << " via " << via << ": " << s.error_message();
    EXPECT_EQ(resp.items_recorded(), 2u);
  }
  std::vector<std::pair<std::string, uint64_t>> written;
  for (int i = 0; i < 12; ++i) {
    written.emplace_back(absl::StrCat("user-", i), 7000 + i);
  }
  ExpectAllOnEveryOwner(written);
  // Every message landed in a partition its consumers own: none skipped.
  for (int32_t r = 0; r < kReplicas; ++r) {
    EXPECT_EQ(BadMessages(r), 0u) << "replica " << r;
  }
}

TEST_F(ReplicatedWritesTest, RequestFormatProducesOneMessagePerUser) {
  edit_config_ = [](ServerConfig* c) {
    c->kafka.format = KafkaMessageFormat::kRequest;
  };
  StartAll();
  const std::vector<std::string> users = UsersOwnedBy(0, 1, 2);
  exposure::v1::RecordExposureRequest req;
  // Three exposures, two users: users[0] twice.
  for (int i = 0; i < 3; ++i) {
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(users[i == 1 ? 1 : 0]);
    e->add_item_ids(100 + i);
  }
  exposure::v1::RecordExposureResponse resp;
  ASSERT_TRUE(Record(1, req, &resp).ok());
  EXPECT_EQ(resp.items_recorded(), 3u);
  EXPECT_EQ(servers_[1]->log_producer()->stats().messages_acked, 2u);
  ExpectOnEveryOwner(users[0], 100);
  ExpectOnEveryOwner(users[1], 101);
  ExpectOnEveryOwner(users[0], 102);
}

TEST_F(ReplicatedWritesTest, JsonFormatWritesOnlyItsSurface) {
  edit_config_ = [](ServerConfig* c) {
    c->kafka.format = KafkaMessageFormat::kJson;
    c->kafka.surface = "feed";
  };
  StartAll();
  const std::string user = UsersOwnedBy(1, 2, 1)[0];
  exposure::v1::RecordExposureRequest req;
  req.set_surface("video");
  exposure::v1::Exposure* e = req.add_exposures();
  e->set_user_id(user);
  e->add_item_ids(55);
  exposure::v1::RecordExposureResponse resp;
  const grpc::Status refused = Record(2, req, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("surface: \"video\" cannot be written"));
  EXPECT_THAT(refused.error_message(), HasSubstr("--kafka_surface=\"feed\""));
  req.set_surface("feed");
  ASSERT_TRUE(Record(2, req, &resp).ok());
  for (int32_t r : Owners(user)) {
    EXPECT_TRUE(WaitFor([&] {
      exposure::v1::FilterRecalledRequest f;
      f.set_surface("feed");
      f.set_user_id(user);
      f.add_candidate_ids(55);
      exposure::v1::FilterRecalledResponse out;
      grpc::ClientContext ctx;
      return stubs_[r]->FilterRecalled(&ctx, f, &out).ok() &&
             out.kept_ids_size() == 0;
    })) << "owner "
        << r;
  }
}

TEST_F(ReplicatedWritesTest, DeleteThroughTheLogRemovesOnBothOwnersInOrder) {
  // Batches wait 2 s, so item 1 is still in the consumers' pending batch
  // when the delete arrives: the delete must be applied after it (log
  // order), not before.
  edit_config_ = [](ServerConfig* c) {
    c->kafka.max_batch_wait = absl::Seconds(2);
  };
  StartAll();
  const std::string user = UsersOwnedBy(0, 2, 1)[0];
  const std::vector<int32_t> owners = Owners(user);
  // Written, deleted through the other owner, written again: log order
  // puts item 1 before the delete on both copies, item 2 after it.
  ASSERT_TRUE(RecordOne(owners[0], user, 1).ok());
  const grpc::Status deleted = Delete(owners[1], user);
  ASSERT_TRUE(deleted.ok()) << deleted.error_message();
  ASSERT_TRUE(RecordOne(owners[0], user, 2).ok());
  ExpectOnEveryOwner(user, 2);
  for (int32_t r : owners) {
    bool removed = true;
    ASSERT_TRUE(Recall(r, user, 1, &removed).ok());
    EXPECT_FALSE(removed) << "item 1 survived the delete on owner " << r;
    EXPECT_EQ(servers_[r]->kafka_ingest()->stats().deletes, 1u);
  }
}

TEST_F(ReplicatedWritesTest, ANotOwnedUserIsRefusedBeforeAnythingIsProduced) {
  StartAll();
  const std::string mine = UsersOwnedBy(0, 1, 1)[0];
  const std::string other = UsersOwnedBy(1, 2, 1)[0];
  exposure::v1::RecordExposureRequest req;
  for (const std::string& u : {mine, other}) {
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(u);
    e->add_item_ids(9);
  }
  exposure::v1::RecordExposureResponse resp;
  const grpc::Status s = Record(0, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("exposures[1].user_id"));
  EXPECT_EQ(servers_[0]->log_producer()->stats().messages_acked, 0u);
}

// Two brokers, partitions led alternately by broker 1 and 2; broker 2
// refuses the next Produce requests: the users whose partitions it leads are
// named as not written, the others are written on both owners.
class ReplicatedWritesFailureTest : public ReplicatedWritesTest {
 protected:
  void SetUp() override {
    brokers_ = 2;
    ReplicatedWritesTest::SetUp();
    if (HasFatalFailure()) return;
    for (int p = 0; p < kPartitions; ++p) {
      ASSERT_TRUE(cluster_->SetPartitionLeader(kTopic, p, 1 + p % 2).ok());
    }
    edit_config_ = [](ServerConfig* c) {
      c->kafka.produce_timeout = absl::Seconds(2);
    };
  }
};

TEST_F(ReplicatedWritesFailureTest, APartialFailureNamesWhatWasNotWritten) {
  StartAll();
  // Six users of replicas {0, 1}, in both kinds of partition.
  const std::vector<std::string> users = UsersOwnedBy(0, 1, 6);
  std::vector<std::string> on_broker2;
  for (const std::string& u : users) {
    if (KafkaPartitionForKey(u, kPartitions) % 2 == 1) on_broker2.push_back(u);
  }
  ASSERT_FALSE(on_broker2.empty());
  ASSERT_LT(on_broker2.size(), users.size());
  // A permanent error of the partition's batch, which librdkafka does not
  // retry (a topic-level one such as an authorization failure would fail
  // every partition). Broker 2 leads one partition of these users (3). The
  // call's messages to it may go in one Produce request or in several
  // (linger.ms=0 sends what is queued as soon as it can: a warm producer
  // often sends the first message alone), so up to one request per message
  // fails; errors left over fail the first tries of the retry below.
  cluster_->FailNextProduceRequestsOn(2, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
                                      on_broker2.size());
  exposure::v1::RecordExposureRequest req;
  for (size_t i = 0; i < users.size(); ++i) {
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(users[i]);
    e->add_item_ids(500 + i);
  }
  exposure::v1::RecordExposureResponse resp;
  const grpc::Status s = Record(1, req, &resp);
  ASSERT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_THAT(s.error_message(),
              HasSubstr(absl::StrCat("Kafka did not acknowledge ",
                                     on_broker2.size(), " of ", users.size())));
  std::vector<std::pair<std::string, uint64_t>> acknowledged, all;
  for (size_t i = 0; i < users.size(); ++i) {
    const std::string named =
        absl::StrCat("exposures[", i, "] (user \"", users[i], "\")");
    const bool failed = KafkaPartitionForKey(users[i], kPartitions) % 2 == 1;
    all.emplace_back(users[i], 500 + i);
    if (failed) {
      EXPECT_THAT(s.error_message(), HasSubstr(named));
    } else {
      // Acknowledged: named nowhere, and on both copies.
      EXPECT_THAT(s.error_message(), Not(HasSubstr(named)));
      acknowledged.emplace_back(users[i], 500 + i);
    }
  }
  ExpectAllOnEveryOwner(acknowledged);
  // The retry the message invites writes everything.
  ASSERT_TRUE(WaitFor([&] { return Record(1, req, &resp).ok(); }));
  ExpectAllOnEveryOwner(all);
}

TEST_F(ReplicatedWritesFailureTest, ABrokerDownIsUnavailableAndLosesNothing) {
  StartAll();
  // Users of replicas {1, 2} in partition 4, which broker 1 leads.
  std::string before, during, after;
  for (const std::string& u : UsersOwnedBy(1, 2, 40)) {
    if (KafkaPartitionForKey(u, kPartitions) % 2 != 0) continue;
    (before.empty() ? before : during.empty() ? during : after) = u;
  }
  ASSERT_FALSE(after.empty());
  ASSERT_TRUE(RecordOne(1, before, 11).ok());
  cluster_->SetBrokerDown(1);
  const grpc::Status down = RecordOne(2, during, 12);
  EXPECT_EQ(down.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(down.error_message(),
              HasSubstr(absl::StrCat("not written: exposures[0] (user \"",
                                     during, "\")")));
  const grpc::Status deleted = Delete(1, before);
  EXPECT_EQ(deleted.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(deleted.error_message(),
              HasSubstr(absl::StrCat("the delete of user \"", before, "\"")));
  cluster_->SetBrokerUp(1);
  ASSERT_TRUE(WaitFor([&] { return RecordOne(1, after, 13).ok(); }));
  // The acknowledged writes are on both copies; the refused delete did not
  // happen.
  ExpectOnEveryOwner(before, 11);
  ExpectOnEveryOwner(after, 13);
}

}  // namespace
}  // namespace exposure_filter
