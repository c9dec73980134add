// Replicated writes against librdkafka's mock cluster, three real servers
// in-process (P = 6, N = 3, R = 2): a
// RecordExposure, DeleteUser, AddTracedUsers or RemoveTracedUsers sent to
// either owner of a user is produced
// to the exposure topic, answered OK only once Kafka acknowledged it, and
// applied from the log by both owners; a write Kafka did not acknowledge
// answers UNAVAILABLE naming what was not written, and nothing acknowledged
// is lost. Waits poll with generous deadlines; nothing here measures time.
#include <grpcpp/grpcpp.h>
#include <librdkafka/rdkafka.h>

#include <future>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/partitioning.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "src/ingest/exposure_log_producer.h"
#include "src/ingest/kafka_message_decoder.h"
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
  template <typename Req, typename Resp>
  grpc::Status Trace(int32_t r, const std::vector<std::string>& users,
                     Resp* resp) {
    Req req;
    for (const std::string& u : users) req.add_user_ids(u);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    if constexpr (std::is_same_v<Req, exposure::v1::AddTracedUsersRequest>) {
      return stubs_[r]->AddTracedUsers(&ctx, req, resp);
    } else {
      return stubs_[r]->RemoveTracedUsers(&ctx, req, resp);
    }
  }
  grpc::Status AddTraced(int32_t r, const std::vector<std::string>& users,
                         exposure::v1::AddTracedUsersResponse* resp) {
    return Trace<exposure::v1::AddTracedUsersRequest>(r, users, resp);
  }
  grpc::Status RemoveTraced(int32_t r, const std::vector<std::string>& users,
                            exposure::v1::RemoveTracedUsersResponse* resp) {
    return Trace<exposure::v1::RemoveTracedUsersRequest>(r, users, resp);
  }
  // Replica r's traced users -> traced_since_ms (empty if the call failed).
  std::map<std::string, int64_t> TracedOn(int32_t r) {
    exposure::v1::ListTracedUsersResponse resp;
    grpc::ClientContext ctx;
    std::map<std::string, int64_t> out;
    if (!stubs_[r]->ListTracedUsers(&ctx, {}, &resp).ok()) return out;
    for (const exposure::v1::TracedUser& u : resp.users()) {
      out[u.user_id()] = u.traced_since_ms();
    }
    return out;
  }
  exposure::v1::ExplainResponse Explain(int32_t r, const std::string& user,
                                        const std::vector<uint64_t>& items) {
    exposure::v1::ExplainRequest req;
    req.set_user_id(user);
    for (uint64_t i : items) req.add_item_ids(i);
    exposure::v1::ExplainResponse resp;
    grpc::ClientContext ctx;
    if (!stubs_[r]->Explain(&ctx, req, &resp).ok()) resp.Clear();
    return resp;
  }
  uint64_t BadMessages(int32_t r, BadMessageReason reason) {
    return servers_[r]->kafka_ingest()->stats().bad_messages[static_cast<int>(
        reason)];
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

TEST_F(ReplicatedWritesTest, TracingThroughOneOwnerTracesBothInLogOrder) {
  // Batches wait 2 s, so item 1 is still in the consumers' pending batch
  // when the trace_add arrives: it must be applied before it (untraced).
  edit_config_ = [](ServerConfig* c) {
    c->kafka.max_batch_wait = absl::Seconds(2);
  };
  StartAll();
  const std::string user = UsersOwnedBy(0, 2, 1)[0];
  const std::vector<int32_t> owners = Owners(user);
  const int32_t a = owners[0], b = owners[1];
  ASSERT_TRUE(RecordOne(a, user, 1).ok());
  const int64_t before = clock_.NowMs();
  exposure::v1::AddTracedUsersResponse added;
  const grpc::Status traced = AddTraced(a, {user, user}, &added);
  ASSERT_TRUE(traced.ok()) << traced.error_message();
  const int64_t after = clock_.NowMs();
  EXPECT_EQ(added.added(), 1u);  // duplicates count once
  EXPECT_EQ(added.traced(), 1u);
  // Item 2 is written through the other owner, after the trace_add.
  const int64_t t2 = clock_.NowMs();
  exposure::v1::RecordExposureRequest req;
  exposure::v1::Exposure* e = req.add_exposures();
  e->set_user_id(user);
  e->add_item_ids(2);
  e->set_event_time_ms(t2);
  exposure::v1::RecordExposureResponse resp;
  ASSERT_TRUE(Record(b, req, &resp).ok());
  ExpectOnEveryOwner(user, 2);
  // Both copies trace the user since the same time, the receiving
  // replica's clock when it produced the record.
  std::vector<int64_t> since;
  for (int32_t r : owners) {
    ASSERT_TRUE(WaitFor([&] { return TracedOn(r).count(user) == 1; }))
        << "owner " << r << " never traced " << user;
    since.push_back(TracedOn(r)[user]);
    EXPECT_GE(since.back(), before) << "owner " << r;
    EXPECT_LE(since.back(), after) << "owner " << r;
    const exposure::v1::ExplainResponse x = Explain(r, user, {1, 2});
    ASSERT_TRUE(x.traced()) << "owner " << r;
    EXPECT_EQ(x.traced_since_ms(), since.back());
    ASSERT_EQ(x.items_size(), 2);
    // Item 1 was logged before the trace_add: filtered, not in the trace.
    EXPECT_TRUE(x.items(0).filtered()) << "owner " << r;
    EXPECT_EQ(x.items(0).recorded_exposures_ms_size(), 0) << "owner " << r;
    ASSERT_EQ(x.items(1).recorded_exposures_ms_size(), 1) << "owner " << r;
    EXPECT_EQ(x.items(1).recorded_exposures_ms(0), t2) << "owner " << r;
  }
  EXPECT_EQ(since[0], since[1]);
  const int32_t other = 3 - a - b;  // owns none of the user's partitions
  EXPECT_EQ(TracedOn(other).count(user), 0u);

  // Removed through the other owner: on both.
  exposure::v1::RemoveTracedUsersResponse removed;
  const grpc::Status untraced = RemoveTraced(b, {user}, &removed);
  ASSERT_TRUE(untraced.ok()) << untraced.error_message();
  EXPECT_EQ(removed.removed(), 1u);
  EXPECT_EQ(removed.traced(), 0u);
  for (int32_t r : owners) {
    EXPECT_TRUE(WaitFor([&] { return TracedOn(r).empty(); }))
        << "owner " << r << " still traces " << user;
    EXPECT_FALSE(Explain(r, user, {2}).traced()) << "owner " << r;
    EXPECT_EQ(servers_[r]->kafka_ingest()->stats().trace_changes, 2u);
    EXPECT_EQ(BadMessages(r), 0u) << "owner " << r;
  }
}

TEST_F(ReplicatedWritesTest, TracingRefusesBadOrForeignUsersBeforeProducing) {
  StartAll();
  const std::string mine = UsersOwnedBy(0, 1, 1)[0];
  const std::string other = UsersOwnedBy(1, 2, 1)[0];
  exposure::v1::AddTracedUsersResponse added;
  const grpc::Status foreign = AddTraced(0, {mine, other}, &added);
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(foreign.error_message(), HasSubstr("user_ids[1]"));
  exposure::v1::RemoveTracedUsersResponse removed;
  const grpc::Status empty = RemoveTraced(0, {}, &removed);
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(empty.error_message(), HasSubstr("user_ids"));
  EXPECT_EQ(servers_[0]->log_producer()->stats().messages_acked, 0u);
}

TEST_F(ReplicatedWritesTest, AFullCopySkipsTheTraceAndKeepsConsuming) {
  const std::string user = UsersOwnedBy(0, 1, 1)[0];
  // Replica 1 may trace nobody; replica 0 the default.
  edit_config_ = [](ServerConfig* c) {
    if (c->cluster.replica_ordinal == 1) c->trace_limits.max_users = 0;
  };
  StartAll();
  // The receiving copy checks its own limit first: nothing is produced.
  exposure::v1::AddTracedUsersResponse added;
  const grpc::Status full = AddTraced(1, {user}, &added);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(full.error_message(), HasSubstr("--trace_max_users=0"));
  EXPECT_EQ(servers_[1]->log_producer()->stats().messages_acked, 0u);
  // Through replica 0 it is written; replica 1 skips it and counts it.
  ASSERT_TRUE(AddTraced(0, {user}, &added).ok());
  EXPECT_TRUE(WaitFor([&] { return TracedOn(0).count(user) == 1; }));
  EXPECT_TRUE(WaitFor(
      [&] { return BadMessages(1, BadMessageReason::kTraceFull) == 1; }));
  EXPECT_TRUE(TracedOn(1).empty());
  // Its partition did not stall on the record.
  ASSERT_TRUE(RecordOne(0, user, 5).ok());
  ExpectOnEveryOwner(user, 5);
  EXPECT_EQ(BadMessages(0), 0u);
}

TEST_F(ReplicatedWritesTest, ARecordOfAnUnknownOpIsSkippedAndTheRestApplied) {
  StartAll();
  const std::string user = UsersOwnedBy(1, 2, 1)[0];
  // What a newer replica might write: skipped as undecodable by this one,
  // never read as exposures, and the partition goes on.
  // Its value parses as an Exposure of item 9: read as one, it would file
  // item 9 for the user.
  exposure::v1::Exposure looks_like_one;
  looks_like_one.set_user_id(user);
  looks_like_one.add_item_ids(9);
  LogMessage m;
  m.key = user;
  m.value = looks_like_one.SerializeAsString();
  m.op = "trace_pause";
  m.what = "newer";
  std::promise<size_t> failures;
  servers_[1]->log_producer()->Produce(
      {m}, [&](std::vector<LogDeliveryFailure> f, WrittenOffsets) {
        failures.set_value(f.size());
      });
  ASSERT_EQ(failures.get_future().get(), 0u);
  ASSERT_TRUE(RecordOne(2, user, 8).ok());
  ExpectOnEveryOwner(user, 8);
  for (int32_t r : Owners(user)) {
    bool removed = true;
    ASSERT_TRUE(Recall(r, user, 9, &removed).ok());
    EXPECT_FALSE(removed) << "owner " << r << " read the record as exposures";
    EXPECT_EQ(BadMessages(r, BadMessageReason::kUndecodable), 1u)
        << "owner " << r;
    EXPECT_EQ(BadMessages(r), 1u) << "owner " << r;
  }
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

TEST_F(ReplicatedWritesFailureTest, ATraceChangeNotWrittenChangesNothing) {
  StartAll();
  // Two users of replicas {0, 2} in partitions broker 1 leads.
  std::vector<std::string> users;
  for (const std::string& u : UsersOwnedBy(0, 2, 40)) {
    if (KafkaPartitionForKey(u, kPartitions) % 2 == 0) users.push_back(u);
  }
  ASSERT_GE(users.size(), 2u);
  users.resize(2);
  cluster_->SetBrokerDown(1);
  exposure::v1::AddTracedUsersResponse added;
  const grpc::Status down = AddTraced(2, users, &added);
  EXPECT_EQ(down.error_code(), grpc::StatusCode::UNAVAILABLE);
  for (const std::string& u : users) {
    EXPECT_THAT(down.error_message(),
                HasSubstr(absl::StrCat("the trace_add of user \"", u, "\"")));
  }
  EXPECT_THAT(down.error_message(),
              HasSubstr("nothing of this call was written"));
  cluster_->SetBrokerUp(1);
  // Exposures written after it are on both copies; had the trace_add been
  // written, it would be applied before them (log order).
  ASSERT_TRUE(WaitFor([&] { return RecordOne(0, users[0], 21).ok(); }));
  ASSERT_TRUE(RecordOne(0, users[1], 22).ok());
  ExpectOnEveryOwner(users[0], 21);
  ExpectOnEveryOwner(users[1], 22);
  for (int32_t r : Owners(users[0])) {
    EXPECT_TRUE(TracedOn(r).empty()) << "owner " << r;
    EXPECT_EQ(servers_[r]->kafka_ingest()->stats().trace_changes, 0u);
  }
}

// message.max.bytes set by the operator (--kafka_config), small enough for
// a test to exceed: the producer reads the configured value, not a default.
class ReplicatedWritesRecordSizeTest : public ReplicatedWritesTest {
 protected:
  static constexpr int kMaxMessageBytes = 20000;
  void SetUp() override {
    ReplicatedWritesTest::SetUp();
    edit_config_ = [](ServerConfig* c) {
      c->kafka.librdkafka_config.emplace_back("message.max.bytes",
                                              absl::StrCat(kMaxMessageBytes));
    };
  }
};

TEST_F(ReplicatedWritesRecordSizeTest,
       ARecordOverTheProducersLimitIsInvalidArgumentAndNothingIsWritten) {
  StartAll();
  const std::vector<std::string> users = UsersOwnedBy(0, 1, 2);
  exposure::v1::RecordExposureRequest req;
  exposure::v1::Exposure* small = req.add_exposures();
  small->set_user_id(users[0]);
  small->add_item_ids(700);
  // 3,000 fixed64 ids: ~24 KB in one binary Exposure message, over 20,000.
  exposure::v1::Exposure* big = req.add_exposures();
  big->set_user_id(users[1]);
  for (uint64_t i = 1; i <= 3000; ++i) big->add_item_ids(i);
  ExposureLogProducer* producer = servers_[1]->log_producer();
  ASSERT_NE(producer, nullptr);
  const ExposureLogProducerStats before = producer->stats();
  exposure::v1::RecordExposureResponse resp;
  const grpc::Status s = Record(1, req, &resp);
  ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  EXPECT_THAT(
      s.error_message(),
      HasSubstr(absl::StrCat("RecordExposure: exposures[1] (user \"", users[1],
                             "\"): its Kafka record would be ")));
  EXPECT_THAT(s.error_message(),
              HasSubstr(absl::StrCat("message.max.bytes=", kMaxMessageBytes)));
  EXPECT_THAT(s.error_message(), HasSubstr("nothing of this call was written"));
  // Refused before anything was enqueued: the small user's message too.
  const ExposureLogProducerStats after = producer->stats();
  EXPECT_EQ(after.messages_acked, before.messages_acked);
  EXPECT_EQ(after.messages_failed, before.messages_failed);
  EXPECT_EQ(after.messages_in_flight, 0u);
  // The size was the only reason: the call without the big exposure is
  // written, and is on both owners.
  req.mutable_exposures()->RemoveLast();
  ASSERT_TRUE(Record(1, req, &resp).ok());
  ExpectOnEveryOwner(users[0], 700);
}

// A fatal idempotence error on replica 1's producer: health says
// NOT_SERVING and its writes answer UNAVAILABLE saying the producer is
// being rebuilt, until a new handle reaches the brokers; then SERVING and
// writes are taken again. --max_serving_lag=0 turns the lag gate off, so
// only the producer can turn health down here (the broker is down across
// the error to hold the rebuild).
class ReplicatedWritesFatalProducerTest : public ReplicatedWritesTest {
 protected:
  void SetUp() override {
    ReplicatedWritesTest::SetUp();
    edit_config_ = [](ServerConfig* c) {
      c->max_serving_lag = absl::ZeroDuration();
    };
  }
  grpc::health::v1::HealthCheckResponse::ServingStatus HealthOf(int32_t r) {
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", servers_[r]->port()),
                            grpc::InsecureChannelCredentials()));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("exposure.v1.ExposureFilter");
    grpc::health::v1::HealthCheckResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    if (!stub->Check(&ctx, req, &resp).ok()) {
      return grpc::health::v1::HealthCheckResponse::UNKNOWN;
    }
    return resp.status();
  }
};

TEST_F(ReplicatedWritesFatalProducerTest,
       AFatalErrorTurnsHealthDownUntilTheProducerIsRebuilt) {
  using grpc::health::v1::HealthCheckResponse;
  StartAll();
  const std::string user = UserOwnedBy("f-", 1, 2);
  ASSERT_TRUE(RecordOne(1, user, 21).ok());
  ExposureLogProducer* producer = servers_[1]->log_producer();
  ASSERT_NE(producer, nullptr);
  ASSERT_EQ(HealthOf(1), HealthCheckResponse::SERVING);

  cluster_->SetBrokerDown(1);
  producer->RaiseFatalErrorForTesting("sequence lost in this test");
  ASSERT_TRUE(
      WaitFor([&] { return HealthOf(1) == HealthCheckResponse::NOT_SERVING; }));
  const grpc::Status refused = RecordOne(1, user, 22);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(),
              HasSubstr(absl::StrCat(
                  "not written: exposures[0] (user \"", user,
                  "\"): the exposure log producer is being rebuilt after a "
                  "fatal Kafka error (test_fatal_error: sequence lost in "
                  "this test): not sent")));
  EXPECT_THAT(refused.error_message(), HasSubstr("retrying the call is safe"));
  // The other owner's producer is untouched (its writes only time out
  // while the broker is down): its health stays up.
  EXPECT_EQ(HealthOf(2), HealthCheckResponse::SERVING);
  EXPECT_EQ(producer->stats().rebuilds, 0u);

  cluster_->SetBrokerUp(1);
  ASSERT_TRUE(
      WaitFor([&] { return HealthOf(1) == HealthCheckResponse::SERVING; }));
  EXPECT_EQ(producer->stats().rebuilds, 1u);
  ASSERT_TRUE(WaitFor([&] { return RecordOne(1, user, 23).ok(); }));
  ExpectOnEveryOwner(user, 21);
  ExpectOnEveryOwner(user, 23);
}

}  // namespace
}  // namespace exposure_filter
