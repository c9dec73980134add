// FilterReplica (mode B+) against the real server in-process: local
// answers after the first snapshot, pushed writes filtered with no call,
// deletes, aging across a slice boundary, leases, the byte bound, a broken
// stream; and against a scripted fake, a sequence gap detected and
// resynced, push batches applied push by push (a gap inside one
// detected), and no subscribe left in flight by a user forgotten or
// evicted before its snapshot.
#include "exposure_filter/filter_replica.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/item_hash.h"
#include "exposure_filter/session_push_batches.h"
#include "gtest/gtest.h"
#include "src/client/filter_replica_impl.h"
#include "src/filter/filter_encoder.h"
#include "src/filter/filter_policy.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tests/server/session_test_client.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;

constexpr int64_t kNowMs = 1'700'000'000'000;
constexpr int64_t kDayMs = 24LL * 3600 * 1000;

FilterReplicaOptions TestOptions() {
  FilterReplicaOptions o;
  // Generous for sanitizer builds on a loaded machine; nothing is timed.
  o.deadline = absl::Seconds(20);
  o.max_staleness = absl::Seconds(5);
  o.ping_interval = absl::Milliseconds(20);
  return o;
}

class FilterReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(testing::SessionTestConfig()); }

  void StartServer(const ServerConfig& c) {
    auto server = ExposureFilterServer::Start(c, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    // Redial soon after a server went away (gRPC's default waits 1 s and
    // more): one test restarts the server on the same port.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
    channel_ =
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                  grpc::InsecureChannelCredentials(), args);
    stub_ = v1::ExposureFilter::NewStub(channel_);
  }

  std::unique_ptr<FilterReplica> Replica(
      FilterReplicaOptions o = TestOptions()) {
    auto r = FilterReplica::Connect(channel_, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }

  void Record(const std::string& user, std::vector<uint64_t> ids,
              int64_t event_ms = 0) {
    v1::RecordExposureRequest req;
    req.set_surface("h");
    v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    for (uint64_t id : ids) e->add_item_ids(id);
    e->set_event_time_ms(event_ms);
    v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    ASSERT_TRUE(stub_->RecordExposure(&ctx, req, &resp).ok());
  }

  void DeleteUser(const std::string& user) {
    v1::DeleteUserRequest req;
    req.set_surface("h");
    req.set_user_id(user);
    v1::DeleteUserResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->DeleteUser(&ctx, req, &resp).ok());
  }

  // FilterRecalled's keep flags for `ids`.
  std::vector<uint8_t> Unary(const std::string& user,
                             const std::vector<uint64_t>& ids) {
    return testing::ServerKeep(stub_.get(), "h", user, ids);
  }

  static std::vector<uint8_t> Check(FilterReplica& r, const std::string& user,
                                    const std::vector<uint64_t>& ids,
                                    CheckPath* path = nullptr) {
    std::vector<uint8_t> keep(ids.size(), 7);
    const absl::Status s = r.Check("h", user, ids, {}, keep.data(), path);
    EXPECT_TRUE(s.ok()) << s;
    return keep;
  }

  ManualClock clock_{kNowMs};
  std::unique_ptr<ExposureFilterServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ExposureFilter::Stub> stub_;
};

TEST_F(FilterReplicaTest, FirstUseWaitsForTheSnapshotThenAnswersLocally) {
  Record("u1", {1, 2});
  auto r = Replica();
  CheckPath path = CheckPath::kUnary;
  EXPECT_EQ(Check(*r, "u1", {1, 2, 3}, &path), (std::vector<uint8_t>{0, 0, 1}));
  EXPECT_EQ(path, CheckPath::kLocal);
  EXPECT_EQ(Check(*r, "u1", {3, 1}, &path), (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(path, CheckPath::kLocal);
  const FilterReplicaStats st = r->stats();
  EXPECT_EQ(st.snapshots, 1u);
  EXPECT_EQ(st.local_checks, 2u);
  EXPECT_EQ(st.users_held, 1u);
  EXPECT_GT(st.bytes_held, 0u);
  EXPECT_DOUBLE_EQ(st.hit_ratio(), 1.0);
  EXPECT_LT(st.staleness, absl::Seconds(5));
}

TEST_F(FilterReplicaTest, PushedWritesAreFilteredWithNoCall) {
  auto r = Replica();
  EXPECT_EQ(Check(*r, "u1", {5, 6}), (std::vector<uint8_t>{1, 1}));
  Record("u1", {5});
  ASSERT_TRUE(r->Sync().ok());
  CheckPath path = CheckPath::kUnary;
  EXPECT_EQ(Check(*r, "u1", {5, 6}, &path), (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(path, CheckPath::kLocal);
  const FilterReplicaStats st = r->stats();
  EXPECT_EQ(st.pushes, 1u);
  EXPECT_EQ(st.pushed_items, 1u);
  EXPECT_EQ(st.stream_checks + st.unary_checks, 0u);
}

TEST_F(FilterReplicaTest, ItemsNotedAsShownAreFilteredBeforeTheirPush) {
  auto r = Replica();
  EXPECT_EQ(Check(*r, "u1", {5, 6}), (std::vector<uint8_t>{1, 1}));
  // Not held: nothing to note into, and no subscription made.
  r->NoteShown("h", "u2", std::vector<uint64_t>{9});
  // Shown and handed to a logger that has not written yet: the server
  // has neither item, the local check removes them already.
  r->NoteShown("h", "u1", std::vector<uint64_t>{5, 7});
  CheckPath path = CheckPath::kUnary;
  EXPECT_EQ(Check(*r, "u1", {5, 6, 7}, &path), (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(path, CheckPath::kLocal);
  EXPECT_EQ(r->stats().noted_items, 2u);
  EXPECT_EQ(r->stats().stream_checks + r->stats().unary_checks, 0u);
  // The server's push of the same write changes nothing.
  Record("u1", {5, 7});
  ASSERT_TRUE(r->Sync().ok());
  EXPECT_EQ(Check(*r, "u1", {5, 6, 7}, &path), (std::vector<uint8_t>{0, 1, 0}));
  // u2 was not subscribed by the note: its first check waits for a
  // snapshot, which does not hold 9.
  EXPECT_EQ(Check(*r, "u2", {9}), (std::vector<uint8_t>{1}));
}

// One RecordExposure naming several held users: the server queues all
// their pushes before writing any, and sends them to the replica (which
// opts in) as one SessionPushes; each push is applied as if alone.
TEST_F(FilterReplicaTest, APushBatchIsAppliedPushByPush) {
  auto r = Replica();
  constexpr int kUsers = 4;
  for (int u = 0; u < kUsers; ++u) {
    EXPECT_EQ(Check(*r, absl::StrCat("u", u), {10, 20}),
              (std::vector<uint8_t>{1, 1}));
  }
  v1::RecordExposureRequest req;
  req.set_surface("h");
  for (uint64_t id : {10, 20}) {
    for (int u = 0; u < kUsers; ++u) {
      v1::Exposure* e = req.add_exposures();
      e->set_user_id(absl::StrCat("u", u));
      e->add_item_ids(id);
    }
  }
  v1::RecordExposureResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->RecordExposure(&ctx, req, &resp).ok());
  ASSERT_TRUE(r->Sync().ok());
  for (int u = 0; u < kUsers; ++u) {
    CheckPath path = CheckPath::kUnary;
    EXPECT_EQ(Check(*r, absl::StrCat("u", u), {10, 20, 30}, &path),
              (std::vector<uint8_t>{0, 0, 1}))
        << "u" << u;
    EXPECT_EQ(path, CheckPath::kLocal);
  }
  const FilterReplicaStats st = r->stats();
  EXPECT_EQ(st.pushes, 2u * kUsers);
  EXPECT_EQ(st.pushed_items, 2u * kUsers);
  EXPECT_EQ(st.gaps, 0u);
  EXPECT_EQ(st.stream_checks + st.unary_checks, 0u);
}

TEST_F(FilterReplicaTest, ADeleteOnTheServerEmptiesTheCopy) {
  Record("u1", {5});
  auto r = Replica();
  EXPECT_EQ(Check(*r, "u1", {5}), (std::vector<uint8_t>{0}));
  DeleteUser("u1");
  ASSERT_TRUE(r->Sync().ok());
  CheckPath path = CheckPath::kUnary;
  EXPECT_EQ(Check(*r, "u1", {5}, &path), (std::vector<uint8_t>{1}));
  EXPECT_EQ(path, CheckPath::kLocal);
  EXPECT_EQ(r->stats().resets, 1u);
}

TEST_F(FilterReplicaTest, SlicesAgeOutAsOnTheServerNeverBefore) {
  // An item in the oldest slice the window holds, one in the newest.
  const int64_t span = 5 * kDayMs;
  const int64_t old_event = kNowMs - 30 * kDayMs + 1000;
  Record("u1", {1}, old_event);
  Record("u1", {2});
  auto r = Replica();
  EXPECT_EQ(Check(*r, "u1", {1, 2}), (std::vector<uint8_t>{0, 0}));
  // The old slice expires at its end + 30 days: move the server's clock
  // across it. Until a pong shows the replica the new time, the slice is
  // still held and claimed: removed, never a miss.
  const int64_t expiry = (old_event / span + 1) * span + 30 * kDayMs;
  clock_.Advance(absl::Milliseconds(expiry - kNowMs));
  ASSERT_EQ(Unary("u1", {1, 2}), (std::vector<uint8_t>{1, 0}));
  ASSERT_TRUE(r->Sync().ok());
  CheckPath path = CheckPath::kUnary;
  EXPECT_EQ(Check(*r, "u1", {1, 2}, &path), (std::vector<uint8_t>{1, 0}))
      << "aged out on the replica as on the server";
  EXPECT_EQ(path, CheckPath::kLocal);
  // One millisecond before the expiry the server still holds the slice:
  // the replica must not drop it early (it answers through mode A while
  // the server's clock may be on either side of the expiry).
  clock_.Set(expiry - 1);
  auto fresh = Replica();
  EXPECT_EQ(Check(*fresh, "u1", {1, 2}, &path), Unary("u1", {1, 2}));
}

TEST_F(FilterReplicaTest, AnUncertainExpiryIsAnsweredByTheServer) {
  const int64_t span = 5 * kDayMs;
  const int64_t old_event = kNowMs - 30 * kDayMs + 1000;
  const int64_t expiry = (old_event / span + 1) * span + 30 * kDayMs;
  Record("u1", {1}, old_event);
  clock_.Set(expiry - 1);
  auto r = Replica();
  // The server's clock is 1 ms before the expiry: the replica cannot know
  // which side of it the server is on by the time it answers.
  CheckPath path = CheckPath::kLocal;
  EXPECT_EQ(Check(*r, "u1", {1}, &path), (std::vector<uint8_t>{0}));
  EXPECT_NE(path, CheckPath::kLocal);
  EXPECT_GT(r->stats().aging, 0u);
}

TEST_F(FilterReplicaTest, AnExpiredLeaseIsRenewedOnNextUse) {
  auto r = Replica();
  EXPECT_EQ(Check(*r, "u1", {1}), (std::vector<uint8_t>{1}));
  clock_.Advance(absl::Minutes(11));
  server_->session_hub().Tick(server_->store().clock().MonotonicMs());
  ASSERT_TRUE(r->Sync().ok());
  EXPECT_EQ(r->stats().expired, 1u);
  Record("u1", {1});  // not pushed: the lease ran out
  CheckPath path = CheckPath::kLocal;
  EXPECT_EQ(Check(*r, "u1", {1}, &path), (std::vector<uint8_t>{0}))
      << "an expired copy must not answer";
  EXPECT_EQ(Check(*r, "u1", {1}, &path), (std::vector<uint8_t>{0}));
  EXPECT_EQ(path, CheckPath::kLocal) << "resubscribed";
  EXPECT_EQ(r->stats().snapshots, 2u);
}

TEST_F(FilterReplicaTest, HeldBytesStayUnderTheBound) {
  FilterReplicaOptions o = TestOptions();
  o.max_bytes = 1 << 20;
  auto r = Replica(o);
  // 40 users with ~40 KB filters each (~8 bits per item): 1.6 MB.
  std::vector<uint64_t> ids(40000);
  for (int u = 0; u < 40; ++u) {
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = u * 1000000 + i;
    Record(absl::StrCat("user-", u), ids);
  }
  for (int u = 0; u < 40; ++u) {
    const std::string user = absl::StrCat("user-", u);
    EXPECT_EQ(Check(*r, user, {static_cast<uint64_t>(u) * 1000000 + 7}),
              (std::vector<uint8_t>{0}));
    EXPECT_LE(r->stats().bytes_held, o.max_bytes);
  }
  EXPECT_GT(r->stats().evictions, 0u);
  ASSERT_TRUE(r->Sync().ok());
  EXPECT_LT(server_->session_hub().subscriptions(), 40)
      << "evicted users are unsubscribed";
}

// A user checked again has its runs filed once (max_index_bytes) and is
// answered through them as before: by the server's rules, pushed items
// included. A delete on the server (a new view) and Forget drop them.
TEST_F(FilterReplicaTest, ARepeatedCheckIsAnsweredThroughFiledRuns) {
  std::vector<uint64_t> shown;
  for (uint64_t i = 0; i < 2000; ++i) shown.push_back(i * 7);
  for (int day = 0; day < 4; ++day) {
    Record("u1",
           std::vector<uint64_t>(shown.begin() + day * 500,
                                 shown.begin() + (day + 1) * 500),
           kNowMs - (3 - day) * kDayMs);
  }
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 5000; ++id) ids.push_back(id);
  const std::vector<uint8_t> want = Unary("u1", ids);
  ASSERT_GT(std::count(want.begin(), want.end(), 0), 700);
  auto r = Replica();
  EXPECT_EQ(Check(*r, "u1", ids), want);
  EXPECT_EQ(r->stats().indexed_checks, 0u) << "a user checked once";
  EXPECT_EQ(r->stats().index_bytes, 0u);
  EXPECT_EQ(Check(*r, "u1", ids), want);
  FilterReplicaStats st = r->stats();
  EXPECT_EQ(st.indexed_checks, 1u);
  EXPECT_GT(st.index_bytes, 0u);
  EXPECT_LE(st.index_bytes, TestOptions().max_index_bytes);
  // A write after the filing: its push is checked beside the index.
  Record("u1", {1, 2});
  ASSERT_TRUE(r->Sync().ok());
  std::vector<uint8_t> now = Unary("u1", ids);
  ASSERT_EQ(now[1] + now[2], 0);
  EXPECT_EQ(Check(*r, "u1", ids), now);
  EXPECT_EQ(r->stats().indexed_checks, 2u);
  EXPECT_EQ(r->stats().index_bytes, st.index_bytes);
  // Deleted on the server: the copy's view is replaced, its filing dropped.
  DeleteUser("u1");
  ASSERT_TRUE(r->Sync().ok());
  ASSERT_EQ(r->stats().resets, 1u);
  EXPECT_EQ(r->stats().index_bytes, 0u);
  EXPECT_EQ(Check(*r, "u1", ids), std::vector<uint8_t>(ids.size(), 1));
  // Filed again from its second check on, then forgotten with the user.
  Record("u2", shown);
  const std::vector<uint8_t> want2 = Unary("u2", ids);
  EXPECT_EQ(Check(*r, "u2", ids), want2);
  EXPECT_EQ(Check(*r, "u2", ids), want2);
  EXPECT_GT(r->stats().index_bytes, 0u);
  r->Forget("h", "u2");
  EXPECT_EQ(r->stats().index_bytes, 0u);
  // A light user (one small run) is checked faster through its bit set
  // than through filed runs: none filed, however often it is checked.
  Record("light", std::vector<uint64_t>(shown.begin(), shown.begin() + 100));
  const uint64_t indexed = r->stats().indexed_checks;
  const std::vector<uint8_t> light = Unary("light", ids);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Check(*r, "light", ids), light);
  EXPECT_EQ(r->stats().indexed_checks, indexed);
  EXPECT_EQ(r->stats().index_bytes, 0u);
}

// Filed runs stay within max_index_bytes, the least recently used dropped
// first; 0 files none. Answers never change.
TEST_F(FilterReplicaTest, FiledRunsStayUnderTheirBound) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 5000; ++id) ids.push_back(id);
  for (int u = 0; u < 3; ++u) {
    std::vector<uint64_t> items;
    for (uint64_t i = 0; i < 2000; ++i) items.push_back(i * 3 + u);
    Record(absl::StrCat("user-", u), items);
  }
  // One user's filing, measured.
  size_t one = 0;
  {
    auto r = Replica();
    Check(*r, "user-0", ids);
    Check(*r, "user-0", ids);
    one = r->stats().index_bytes;
    ASSERT_GT(one, 0u);
  }
  FilterReplicaOptions o = TestOptions();
  o.max_index_bytes = one + one / 2;  // room for one user's, not two
  auto r = Replica(o);
  for (int round = 0; round < 3; ++round) {
    for (int u = 0; u < 3; ++u) {
      const std::string user = absl::StrCat("user-", u);
      const std::vector<uint8_t> want = Unary(user, ids);
      EXPECT_EQ(Check(*r, user, ids), want);
      EXPECT_EQ(Check(*r, user, ids), want);
      EXPECT_LE(r->stats().index_bytes, o.max_index_bytes);
      EXPECT_GT(r->stats().index_bytes, 0u);
    }
  }
  EXPECT_EQ(r->stats().indexed_checks, 3u * 3u * 2u - 3u)
      << "every check but each user's first is filed";
  o.max_index_bytes = 0;
  auto none = Replica(o);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Check(*none, "user-1", ids), Unary("user-1", ids));
  }
  EXPECT_EQ(none->stats().indexed_checks, 0u);
  EXPECT_EQ(none->stats().index_bytes, 0u);
  // A bound below one user's index: filed once, used by that check, never
  // kept nor filed again for the same filter.
  o.max_index_bytes = one / 2;
  auto small = Replica(o);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Check(*small, "user-2", ids), Unary("user-2", ids));
  }
  EXPECT_EQ(small->stats().indexed_checks, 1u);
  EXPECT_EQ(small->stats().index_bytes, 0u);
}

TEST_F(FilterReplicaTest, PushedItemsAreCompactedIntoASnapshot) {
  FilterReplicaOptions o = TestOptions();
  o.compact_after_items = 50;
  auto r = Replica(o);
  EXPECT_EQ(Check(*r, "u1", {1}), (std::vector<uint8_t>{1}));
  for (uint64_t i = 0; i < 60; ++i) Record("u1", {100 + i});
  ASSERT_TRUE(r->Sync().ok());
  ASSERT_TRUE(r->Sync().ok());
  const FilterReplicaStats st = r->stats();
  EXPECT_EQ(st.compactions, 1u);
  EXPECT_EQ(st.snapshots, 2u);
  std::vector<uint64_t> all;
  for (uint64_t i = 0; i < 60; ++i) all.push_back(100 + i);
  CheckPath path = CheckPath::kUnary;
  EXPECT_EQ(Check(*r, "u1", all, &path), std::vector<uint8_t>(60, 0));
  EXPECT_EQ(path, CheckPath::kLocal);
}

TEST_F(FilterReplicaTest, ABrokenStreamIsAnsweredByTheServerThenReconnects) {
  auto r = Replica();
  Record("u1", {1});
  EXPECT_EQ(Check(*r, "u1", {1, 2}), (std::vector<uint8_t>{0, 1}));
  // End every stream as a shutdown would, then serve again on a new
  // server at the same address (the first one's data is gone with it).
  const int port = server_->port();
  server_.reset();
  std::vector<uint8_t> keep(2);
  const absl::Status s = r->Check("h", "u1", {1, 2}, {}, keep.data(), nullptr);
  EXPECT_FALSE(s.ok()) << "no server: an error, never a stale local answer";
  ServerConfig c = testing::SessionTestConfig();
  c.listen_address = absl::StrCat("127.0.0.1:", port);
  auto server = ExposureFilterServer::Start(c, &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  stub_ = v1::ExposureFilter::NewStub(channel_);
  Record("u1", {2});
  // Until reconnected, the unary RPC (or an error while the channel
  // redials); then a new snapshot and local answers. Never the old copy.
  CheckPath path = CheckPath::kUnary;
  for (int i = 0; i < 500; ++i) {
    std::vector<uint8_t> keep(2, 7);
    if (r->Check("h", "u1", {1, 2}, {}, keep.data(), &path).ok()) {
      EXPECT_EQ(keep, (std::vector<uint8_t>{1, 0}));
      if (path == CheckPath::kLocal) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(path, CheckPath::kLocal);
  EXPECT_GE(r->stats().reconnects, 1u);
}

// --- Scripted servers
// ---------------------------------------------------------

// The snapshot a scripted server answers `sub` with: an empty filter at
// `sequence`, the default policy, the fixed clock.
v1::SessionResponse EmptySnapshot(uint64_t request_id,
                                  const v1::SessionSubscribe& sub,
                                  uint64_t sequence) {
  const FilterPolicy policy = *FilterPolicy::Create({});
  v1::SessionResponse out;
  out.set_request_id(request_id);
  v1::SessionSnapshot* s = out.mutable_snapshot();
  s->set_surface(sub.surface());
  s->set_user_id(sub.user_id());
  s->set_sequence(sequence);
  std::string empty;
  s->set_version(
      FilterVersionString(EncodeFilter(nullptr, policy, kNowMs, &empty)));
  s->set_filter(empty);
  s->set_server_time_ms(kNowMs);
  s->set_retention_ms(policy.retention_ms());
  s->set_slice_span_ms(policy.slice_span_ms());
  s->set_idle_timeout_ms(600000);
  return out;
}

// A scripted server's mode-A answer: every candidate kept but `exposed`.
v1::SessionResponse KeepAllBut(uint64_t request_id,
                               const v1::FilterRecalledRequest& f,
                               uint64_t exposed) {
  v1::SessionResponse out;
  out.set_request_id(request_id);
  std::string mask((f.candidate_ids_size() + 7) / 8, '\0');
  for (int i = 0; i < f.candidate_ids_size(); ++i) {
    if (f.candidate_ids(i) != exposed) mask[i / 8] |= 1 << (i % 8);
  }
  out.mutable_filter()->set_keep_mask(mask);
  return out;
}

v1::SessionResponse Pong(uint64_t request_id) {
  v1::SessionResponse out;
  out.set_request_id(request_id);
  out.mutable_pong()->set_server_time_ms(kNowMs);
  return out;
}

// A scripted service served in-process, and a replica connected to it.
struct Scripted {
  explicit Scripted(grpc::Service* service,
                    const FilterReplicaOptions& options = TestOptions()) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service);
    server = builder.BuildAndStart();
    auto r = FilterReplica::Connect(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                            grpc::InsecureChannelCredentials()),
        options);
    if (r.ok()) replica = *std::move(r);
  }
  ~Scripted() {
    replica.reset();
    if (server != nullptr) server->Shutdown();
  }
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<FilterReplica> replica;
};

using SessionStreamRw =
    grpc::ServerReaderWriter<v1::SessionResponse, v1::SessionRequest>;

// Answers pings, filter requests (every candidate but item 1 kept) and
// subscribes: a snapshot at 0 for the first, followed by whatever the
// script's `after_first` writes, and a snapshot at 3 for any later one
// (the replica's resync); while `hold_subscribes_`, none: they are kept
// for the test to answer. Writes what the test posts ahead of the answer
// to the next request read (a Sync's ping, say). Records whether the
// stream opted into push batches, and counts unsubscribes (never answered
// here).
class ScriptedSessionService final : public v1::ExposureFilter::Service {
 public:
  using AfterFirstSubscribe = std::function<void(
      const v1::SessionSubscribe&, bool opted_in, SessionStreamRw*)>;
  explicit ScriptedSessionService(AfterFirstSubscribe after_first)
      : after_first_(std::move(after_first)) {}
  grpc::Status Session(grpc::ServerContext* ctx,
                       SessionStreamRw* stream) override {
    const auto& md = ctx->client_metadata();
    auto it = md.find(kSessionPushBatchesMetadataKey);
    opted_in_ = it != md.end() && it->second == "1";
    v1::SessionRequest req;
    while (stream->Read(&req)) {
      std::vector<v1::SessionResponse> posted;
      {
        absl::MutexLock lock(&mu_);
        posted.swap(posted_);
      }
      for (const v1::SessionResponse& r : posted) stream->Write(r);
      if (req.has_ping()) {
        stream->Write(Pong(req.request_id()));
      } else if (req.has_filter()) {
        stream->Write(KeepAllBut(req.request_id(), req.filter(), 1));
      } else if (req.has_subscribe()) {
        const int n = ++subscribes_;
        if (n == 2) quiet_before_second_subscribe_ = quiet_unsubscribes_.load();
        if (hold_subscribes_) {
          absl::MutexLock lock(&mu_);
          held_.push_back(req);
          continue;
        }
        stream->Write(
            EmptySnapshot(req.request_id(), req.subscribe(), n == 1 ? 0 : 3));
        if (n == 1) after_first_(req.subscribe(), opted_in_, stream);
      } else if (req.has_unsubscribe()) {
        ++(req.unsubscribe().quiet() ? quiet_unsubscribes_
                                     : answered_unsubscribes_);
      }
    }
    return grpc::Status::OK;
  }
  // Written on the stream ahead of the answer to the next request read.
  void Post(v1::SessionResponse r) {
    absl::MutexLock lock(&mu_);
    posted_.push_back(std::move(r));
  }
  // The subscribes held so far.
  std::vector<v1::SessionRequest> Held() {
    absl::MutexLock lock(&mu_);
    return held_;
  }

  std::atomic<bool> opted_in_{false};
  std::atomic<bool> hold_subscribes_{false};
  std::atomic<int> subscribes_{0};
  std::atomic<int> quiet_unsubscribes_{0};
  std::atomic<int> answered_unsubscribes_{0};
  std::atomic<int> quiet_before_second_subscribe_{-1};

 private:
  const AfterFirstSubscribe after_first_;
  absl::Mutex mu_;
  std::vector<v1::SessionResponse> posted_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SessionRequest> held_ ABSL_GUARDED_BY(mu_);
};

// Push `seq` of the subscribed user: item `seq`, now.
void SetPush(const v1::SessionSubscribe& s, uint64_t seq, v1::SessionPush* p) {
  p->set_surface(s.surface());
  p->set_user_id(s.user_id());
  p->set_sequence(seq);
  p->set_event_time_ms(kNowMs);
  p->add_item_hashes(HashItemId(seq));
}

// Pushes 1 and 3, one by one: push 2 was lost.
void PushesWithAGap(const v1::SessionSubscribe& s, bool /*opted_in*/,
                    SessionStreamRw* stream) {
  for (uint64_t seq : {1, 3}) {
    v1::SessionResponse r;
    SetPush(s, seq, r.mutable_push());
    stream->Write(r);
  }
}

// Checks u1 (its subscribe), then waits for the resubscribe that the
// script's gap must cause: one gap counted, a second snapshot taken.
void ExpectOneGapResynced(FilterReplica* replica,
                          const std::atomic<int>& subscribes) {
  std::vector<uint8_t> keep(1);
  ASSERT_TRUE(replica->Check("h", "u1", {1}, {}, keep.data()).ok());
  for (int i = 0; i < 500 && subscribes < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(subscribes, 2) << "resubscribed after the gap";
  ASSERT_TRUE(replica->Sync().ok());
  EXPECT_EQ(replica->stats().gaps, 1u);
  EXPECT_EQ(replica->stats().snapshots, 2u);
}

TEST(FilterReplicaGapTest, AGapIsDetectedAndResynced) {
  ScriptedSessionService service(PushesWithAGap);
  Scripted s(&service);
  ASSERT_NE(s.replica, nullptr);
  std::vector<uint8_t> keep(1);
  // Item 1 (pushed before the gap) is exposed; whether this first check
  // is answered before or after the resync depends on timing, and this
  // script's resync snapshot does not hold it, so only the outcome of the
  // gap is checked.
  ASSERT_NO_FATAL_FAILURE(
      ExpectOneGapResynced(s.replica.get(), service.subscribes_));
  CheckPath path = CheckPath::kUnary;
  ASSERT_TRUE(s.replica->Check("h", "u1", {5}, {}, keep.data(), &path).ok());
  EXPECT_EQ(path, CheckPath::kLocal) << "synced again by the new snapshot";
}

// Drops a push and says so (a resync notice, ahead of the third pong after
// the snapshot) but sends no new snapshot: from then on the replica must
// answer through mode A, however fresh its pongs.
class ResyncScriptService final : public v1::ExposureFilter::Service {
 public:
  grpc::Status Session(grpc::ServerContext* /*ctx*/,
                       SessionStreamRw* stream) override {
    v1::SessionRequest req;
    bool snapshot_sent = false;
    while (stream->Read(&req)) {
      if (req.has_subscribe() && !snapshot_sent) {
        snapshot_sent = true;
        stream->Write(EmptySnapshot(req.request_id(), req.subscribe(), 0));
      } else if (req.has_ping()) {
        if (snapshot_sent && pings_after_snapshot_++ == 2) {
          v1::SessionResponse notice;
          notice.mutable_resync()->set_reason(v1::SessionResync::QUEUE_FULL);
          stream->Write(notice);
        }
        stream->Write(Pong(req.request_id()));
      } else if (req.has_filter()) {
        // Item 9, whose push was dropped, was exposed.
        stream->Write(KeepAllBut(req.request_id(), req.filter(), 9));
      }
    }
    return grpc::Status::OK;
  }
  std::atomic<int> pings_after_snapshot_{0};
};

// One SessionPushes: pushes 1 and 2 (items 1, 2), or 1 and 3 with `gap`;
// nothing to a stream that did not opt in.
ScriptedSessionService::AfterFirstSubscribe OneBatch(bool gap) {
  return [gap](const v1::SessionSubscribe& s, bool opted_in,
               SessionStreamRw* stream) {
    if (!opted_in) return;
    v1::SessionResponse batch;
    for (uint64_t seq : {uint64_t{1}, gap ? uint64_t{3} : uint64_t{2}}) {
      SetPush(s, seq, batch.mutable_pushes()->add_pushes());
    }
    stream->Write(batch);
  };
}

TEST(FilterReplicaBatchTest, TheStreamOptsInAndABatchIsAppliedInOrder) {
  ScriptedSessionService service(OneBatch(/*gap=*/false));
  Scripted s(&service);
  ASSERT_NE(s.replica, nullptr);
  std::vector<uint8_t> keep(3);
  ASSERT_TRUE(s.replica->Check("h", "u1", {1, 2, 3}, {}, keep.data()).ok());
  EXPECT_TRUE(service.opted_in_) << "no x-exposure-session-push-batches: 1";
  ASSERT_TRUE(s.replica->Sync().ok());
  CheckPath path = CheckPath::kUnary;
  ASSERT_TRUE(
      s.replica->Check("h", "u1", {1, 2, 3}, {}, keep.data(), &path).ok());
  EXPECT_EQ(keep, (std::vector<uint8_t>{0, 0, 1}));
  EXPECT_EQ(path, CheckPath::kLocal);
  EXPECT_EQ(s.replica->stats().pushes, 2u);
  EXPECT_EQ(s.replica->stats().gaps, 0u);
  EXPECT_EQ(service.subscribes_, 1);
}

TEST(FilterReplicaBatchTest, AGapInsideABatchIsDetectedAndResynced) {
  ScriptedSessionService service(OneBatch(/*gap=*/true));
  Scripted s(&service);
  ASSERT_NE(s.replica, nullptr);
  ASSERT_NO_FATAL_FAILURE(
      ExpectOneGapResynced(s.replica.get(), service.subscribes_));
}

// A replica that checked u1 (subscribing it) and then forgot it.
class FilterReplicaForgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(s_.replica, nullptr);
    ASSERT_TRUE(s_.replica->Check("h", "u1", {5}, {}, keep_.data()).ok());
    s_.replica->Forget("h", "u1");
  }
  ScriptedSessionService service_{
      [](const v1::SessionSubscribe&, bool, SessionStreamRw*) {}};
  Scripted s_{&service_};
  std::vector<uint8_t> keep_ = std::vector<uint8_t>(1);
};

TEST_F(FilterReplicaForgetTest, AForgottenUserIsUnsubscribedQuietly) {
  for (int i = 0; i < 500 && service_.quiet_unsubscribes_ == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(service_.quiet_unsubscribes_, 1);
  EXPECT_EQ(service_.answered_unsubscribes_, 0);
}

// The quiet unsubscribe is held back for the next request to carry (above,
// with nobody else held, the pinger's ping carried it): it still reaches
// the server before that request, in the order sent.
TEST_F(FilterReplicaForgetTest, AHeldBackUnsubscribeGoesBeforeTheNextRequest) {
  ASSERT_TRUE(s_.replica->Check("h", "u2", {5}, {}, keep_.data()).ok());
  EXPECT_EQ(service_.subscribes_, 2);
  EXPECT_EQ(service_.quiet_before_second_subscribe_, 1);
}

// u1 and u2 checked (u1 the least recently), then the server holds its
// subscribes and a gap makes u1 subscribe again: one subscribe in flight
// when the test lets u1 go. Room for 1 MiB, and pushed items never
// compacted, so that pushes can evict.
class FilterReplicaSubscribeInFlightTest : public ::testing::Test {
 protected:
  static FilterReplicaOptions Options() {
    FilterReplicaOptions o = TestOptions();
    o.max_bytes = kMaxBytes;
    o.compact_after_items = size_t{1} << 30;
    return o;
  }

  void SetUp() override {
    ASSERT_NE(s_.replica, nullptr);
    ASSERT_TRUE(s_.replica->Check("h", "u1", {5}, {}, keep_.data()).ok());
    ASSERT_TRUE(s_.replica->Check("h", "u2", {5}, {}, keep_.data()).ok());
    service_.hold_subscribes_ = true;
    service_.Post(Push("u1", 2, {7}));  // the snapshot was at 0: a gap
    ASSERT_TRUE(s_.replica->Sync().ok());
    ASSERT_EQ(s_.replica->stats().subscribes_in_flight, 1u);
  }

  // The user's push `sequence` (the snapshots were at 0 for u1, 3 for u2)
  // of `items`.
  static v1::SessionResponse Push(const std::string& user, uint64_t sequence,
                                  const std::vector<uint64_t>& items) {
    v1::SessionResponse r;
    v1::SessionPush* p = r.mutable_push();
    p->set_surface("h");
    p->set_user_id(user);
    p->set_sequence(sequence);
    p->set_event_time_ms(kNowMs);
    for (uint64_t id : items) p->add_item_hashes(HashItemId(id));
    return r;
  }

  // The held subscribe's answer arrives for a user no longer held: nothing
  // is left in flight, nothing else changes, and u1's next check
  // subscribes again as any first one does.
  void AnswerLateThenCheckU1Again() {
    ASSERT_TRUE(s_.replica->Sync().ok());  // the resubscribe has been read
    const std::vector<v1::SessionRequest> held = service_.Held();
    ASSERT_EQ(held.size(), 1u);
    ASSERT_EQ(held[0].subscribe().user_id(), "u1");
    const FilterReplicaStats before = s_.replica->stats();
    service_.hold_subscribes_ = false;
    service_.Post(EmptySnapshot(held[0].request_id(), held[0].subscribe(), 2));
    ASSERT_TRUE(s_.replica->Sync().ok());
    FilterReplicaStats st = s_.replica->stats();
    EXPECT_EQ(st.subscribes_in_flight, 0u);
    EXPECT_EQ(st.users_held, before.users_held);
    EXPECT_EQ(st.snapshots, before.snapshots);
    CheckPath path = CheckPath::kUnary;
    ASSERT_TRUE(
        s_.replica->Check("h", "u1", {5}, {}, keep_.data(), &path).ok());
    EXPECT_EQ(path, CheckPath::kLocal);
    st = s_.replica->stats();
    EXPECT_EQ(st.subscribes_in_flight, 0u);
    EXPECT_EQ(st.snapshots, before.snapshots + 1);
  }

  static constexpr size_t kMaxBytes = size_t{1} << 20;
  ScriptedSessionService service_{
      [](const v1::SessionSubscribe&, bool, SessionStreamRw*) {}};
  Scripted s_{&service_, Options()};
  std::vector<uint8_t> keep_ = std::vector<uint8_t>(1);
};

// A check waiting for a user's first snapshot is released by Forget: it
// answers through mode A at once, not at its deadline.
TEST_F(FilterReplicaSubscribeInFlightTest,
       ForgetReleasesACheckWaitingForTheSnapshot) {
  auto held_for = [&](const std::string& user) {
    for (const v1::SessionRequest& r : service_.Held()) {
      if (r.subscribe().user_id() == user) return true;
    }
    return false;
  };
  absl::Notification done;
  absl::Status status;
  CheckPath path = CheckPath::kLocal;
  std::vector<uint8_t> keep(2, 7);
  std::thread check([&] {
    status = s_.replica->Check("h", "u3", {1, 5}, {}, keep.data(), &path);
    done.Notify();
  });
  // Its subscribe is held: the check waits for a snapshot that cannot come.
  for (int i = 0; i < 2000 && !held_for("u3"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(held_for("u3"));
  EXPECT_FALSE(done.HasBeenNotified()) << "answered without its snapshot";
  s_.replica->Forget("h", "u3");
  // The check's deadline is 20 s (TestOptions): released long before it,
  // or only by it.
  const bool released = done.WaitForNotificationWithTimeout(absl::Seconds(10));
  check.join();
  EXPECT_TRUE(released) << "the check waited for its deadline";
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(path, CheckPath::kStream);
  EXPECT_EQ(keep, (std::vector<uint8_t>{0, 1}));  // every candidate but 1
}

TEST_F(FilterReplicaSubscribeInFlightTest,
       AUserForgottenBeforeItsSnapshotLeavesNothingInFlight) {
  s_.replica->Forget("h", "u1");
  AnswerLateThenCheckU1Again();
}

TEST_F(FilterReplicaSubscribeInFlightTest,
       AUserEvictedBeforeItsSnapshotLeavesNothingInFlight) {
  // Pushed items that take u2 past the room u1 leaves: u1, the least
  // recently checked, is evicted.
  std::vector<uint64_t> items((kMaxBytes - s_.replica->stats().bytes_held) /
                                  filter_replica_internal::kPushedItemBytes +
                              1);
  for (size_t i = 0; i < items.size(); ++i) items[i] = 1000 + i;
  service_.Post(Push("u2", 4, items));
  ASSERT_TRUE(s_.replica->Sync().ok());
  EXPECT_EQ(s_.replica->stats().evictions, 1u);
  EXPECT_EQ(s_.replica->stats().users_held, 1u);
  AnswerLateThenCheckU1Again();
}

TEST(FilterReplicaResyncTest, AResyncNoticeStopsLocalAnswers) {
  ResyncScriptService service;
  Scripted s(&service);
  ASSERT_NE(s.replica, nullptr);
  std::vector<uint8_t> keep(2);
  CheckPath path = CheckPath::kUnary;
  ASSERT_TRUE(
      s.replica->Check("h", "u1", {9, 10}, {}, keep.data(), &path).ok());
  // Pings until the notice has been sent and read.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.replica->Sync().ok());
  ASSERT_GE(service.pings_after_snapshot_, 3);
  ASSERT_TRUE(
      s.replica->Check("h", "u1", {9, 10}, {}, keep.data(), &path).ok());
  EXPECT_EQ(keep, (std::vector<uint8_t>{0, 1}))
      << "answered from a copy the server said was out of sync";
  EXPECT_NE(path, CheckPath::kLocal);
  EXPECT_EQ(s.replica->stats().resyncs, 1u);
}

}  // namespace
}  // namespace exposure_filter
