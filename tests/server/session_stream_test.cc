// The session stream (docs/session-stream.md) through a real in-process
// server: subscribe-then-snapshot, pushes with consecutive sequences from
// every apply path, reset on delete, mode A and ping on the stream, the
// errors of each request, the limits, leases, the end of a stream, and
// the metrics.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tests/server/session_test_client.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::SessionTestClient;
using ::testing::StartsWith;

constexpr int64_t kNowMs = 1'700'000'000'000;

ServerConfig TestConfig() {
  ServerConfig c = testing::SessionTestConfig();
  // Long, so a shutdown that waited for the drain instead of ending the
  // streams would show (ShutdownEndsStreamsUnavailableAtOnce).
  c.shutdown_grace = absl::Seconds(10);
  return c;
}

class SessionStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(TestConfig()); }

  void StartServer(const ServerConfig& config) {
    absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
        ExposureFilterServer::Start(config, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::ExposureFilter::NewStub(channel_);
  }

  grpc::Status Record(const std::string& surface, const std::string& user,
                      std::vector<uint64_t> ids, int64_t event_ms = 0,
                      std::vector<std::string> keys = {}) {
    v1::RecordExposureRequest req;
    req.set_surface(surface);
    v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    for (uint64_t id : ids) e->add_item_ids(id);
    for (const std::string& k : keys) e->add_item_keys(k);
    e->set_event_time_ms(event_ms);
    v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    return stub_->RecordExposure(&ctx, req, &resp);
  }

  v1::GetFilterResponse Pull(const std::string& surface,
                             const std::string& user) {
    v1::GetFilterRequest req;
    req.set_surface(surface);
    req.set_user_id(user);
    v1::GetFilterResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->GetFilter(&ctx, req, &resp).ok());
    return resp;
  }

  // The next response, which the test expects to be there.
  static v1::SessionResponse Expect(SessionTestClient& c) {
    std::optional<v1::SessionResponse> r = c.Next();
    EXPECT_TRUE(r.has_value()) << "no response from the server";
    return r.value_or(v1::SessionResponse());
  }

  double Metric(const std::string& name, const std::string& label = "",
                const std::string& value = "") {
    for (const prometheus::MetricFamily& f : server_->session_hub().Collect()) {
      if (f.name != name) continue;
      for (const prometheus::ClientMetric& m : f.metric) {
        bool match = label.empty();
        for (const auto& l : m.label) {
          match |= l.name == label && l.value == value;
        }
        if (!match) continue;
        return f.type == prometheus::MetricType::Counter ? m.counter.value
                                                         : m.gauge.value;
      }
    }
    return -1;
  }

  ManualClock clock_{kNowMs};
  std::unique_ptr<ExposureFilterServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ExposureFilter::Stub> stub_;
};

TEST_F(SessionStreamTest, SubscribeAnswersTheFilterGetFilterWouldPull) {
  ASSERT_TRUE(Record("homefeed", "u1", {1, 2, 3}).ok());
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(7, "homefeed", "u1"));
  const v1::SessionResponse r = Expect(c);
  ASSERT_TRUE(r.has_snapshot()) << r.DebugString();
  EXPECT_EQ(r.request_id(), 7u);
  const v1::SessionSnapshot& s = r.snapshot();
  EXPECT_EQ(s.surface(), "homefeed");
  EXPECT_EQ(s.user_id(), "u1");
  EXPECT_EQ(s.sequence(), 0u);
  EXPECT_FALSE(s.not_modified());
  const v1::GetFilterResponse pulled = Pull("homefeed", "u1");
  EXPECT_EQ(s.filter(), pulled.filter());
  EXPECT_EQ(s.version(), pulled.version());
  EXPECT_EQ(s.server_time_ms(), kNowMs);
  EXPECT_EQ(s.retention_ms(), 30LL * 24 * 3600 * 1000);
  EXPECT_EQ(s.slice_span_ms(), 5LL * 24 * 3600 * 1000);
  EXPECT_DOUBLE_EQ(s.fp_rate(), 0.01);
  EXPECT_EQ(s.idle_timeout_ms(), 10LL * 60 * 1000);
  absl::StatusOr<FilterView> view = FilterView::Parse(s.filter());
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(view->MayContainId(2));
}

TEST_F(SessionStreamTest, EveryLaterWriteIsPushedWithTheNextSequence) {
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "homefeed", "u1"));
  ASSERT_EQ(Expect(c).snapshot().sequence(), 0u);
  ASSERT_TRUE(Record("homefeed", "u1", {11, 12}, 0, {"video:9"}).ok());
  ASSERT_TRUE(Record("homefeed", "u2", {13}).ok());  // not subscribed
  ASSERT_TRUE(Record("video", "u1", {14}).ok());     // another surface
  const int64_t late = kNowMs - 3LL * 24 * 3600 * 1000;
  ASSERT_TRUE(Record("homefeed", "u1", {15}, late).ok());
  v1::SessionResponse first = Expect(c);
  ASSERT_TRUE(first.has_push()) << first.DebugString();
  EXPECT_EQ(first.request_id(), 0u);
  EXPECT_EQ(first.push().sequence(), 1u);
  EXPECT_EQ(first.push().user_id(), "u1");
  EXPECT_EQ(first.push().surface(), "homefeed");
  EXPECT_EQ(first.push().event_time_ms(), kNowMs) << "0 resolved to now";
  EXPECT_THAT(
      first.push().item_hashes(),
      ElementsAre(HashItemId(11), HashItemId(12), HashItemKey("video:9")));
  EXPECT_FALSE(first.push().reset());
  v1::SessionResponse second = Expect(c);
  ASSERT_TRUE(second.has_push()) << second.DebugString();
  EXPECT_EQ(second.push().sequence(), 2u);
  EXPECT_EQ(second.push().event_time_ms(), late);
  EXPECT_THAT(second.push().item_hashes(), ElementsAre(HashItemId(15)));
  EXPECT_FALSE(c.Next(std::chrono::milliseconds(200)).has_value())
      << "writes to other users and surfaces are not pushed";
}

TEST_F(SessionStreamTest, WritesAppliedByTheStoreDirectlyArePushedToo) {
  // Whatever applies a write (the Kafka consumer goes through the same
  // store), its subscribers hear of it.
  ASSERT_TRUE(Record("", "u1", {1}).ok());
  const Surface* surface = nullptr;
  for (int i = 0; i < server_->store().num_shards(); ++i) {
    server_->store().VisitShard(i, [&](const Surface& s, absl::string_view,
                                       const UserFilter&) { surface = &s; });
  }
  ASSERT_NE(surface, nullptr);
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "", "u1"));
  ASSERT_TRUE(Expect(c).has_snapshot());
  const uint64_t hashes[] = {HashItemId(99)};
  const UserExposures batch[] = {{"u1", hashes, kNowMs - 1000}};
  server_->store().Record(*surface, batch);
  const v1::SessionResponse r = Expect(c);
  ASSERT_TRUE(r.has_push()) << r.DebugString();
  EXPECT_EQ(r.push().sequence(), 1u);
  EXPECT_THAT(r.push().item_hashes(), ElementsAre(HashItemId(99)));
  EXPECT_EQ(r.push().event_time_ms(), kNowMs - 1000);
}

TEST_F(SessionStreamTest, NothingFallsBetweenTheSnapshotAndTheFirstPush) {
  // Writes run while the stream subscribes, unsubscribes and subscribes
  // again: every subscription's snapshot and the pushes after it must hold
  // every write, with consecutive sequences.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{0};
  std::thread writer([&] {
    auto stub = v1::ExposureFilter::NewStub(channel_);
    for (uint64_t i = 1; !stop; ++i) {
      v1::RecordExposureRequest req;
      req.set_surface("h");
      req.add_exposures()->set_user_id("u1");
      req.mutable_exposures(0)->add_item_ids(i);
      v1::RecordExposureResponse resp;
      grpc::ClientContext ctx;
      ASSERT_TRUE(stub->RecordExposure(&ctx, req, &resp).ok());
      written = i;
    }
  });
  SessionTestClient c(channel_);
  uint64_t id = 0;
  for (int round = 0; round < 40; ++round) {
    while (written < static_cast<uint64_t>(round) * 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    v1::SessionRequest u;
    u.set_request_id(++id);
    u.mutable_unsubscribe()->set_surface("h");
    u.mutable_unsubscribe()->set_user_id("u1");
    ASSERT_TRUE(c.Write(u));
    ASSERT_TRUE(c.Subscribe(++id, "h", "u1"));
  }
  stop = true;
  writer.join();
  const uint64_t last = written;
  ASSERT_TRUE(c.Ping(++id));
  // Replay: after each snapshot, its items plus the pushes that follow.
  // Writes are sequential, so when item i is pushed every item below i was
  // acknowledged before it: each must be in the snapshot or pushed.
  std::optional<FilterView> view;
  std::string bytes;
  std::set<uint64_t> pushed;
  uint64_t sequence = 0;
  uint64_t newest = 0;  // largest item pushed in this subscription
  int snapshots = 0;
  auto covered = [&](uint64_t upto) {
    for (uint64_t i = 1; i <= upto; ++i) {
      if (!view->MayContainId(i) && !pushed.count(HashItemId(i))) return i;
    }
    return uint64_t{0};
  };
  for (std::optional<v1::SessionResponse> r = c.Next(); r.has_value();
       r = c.Next()) {
    if (r->has_pong()) break;
    if (r->has_snapshot()) {
      if (view.has_value()) {
        ASSERT_EQ(covered(newest), 0u)
            << "subscription " << snapshots << ": an item before " << newest
            << " is neither in its snapshot nor pushed";
      }
      newest = 0;
      ++snapshots;
      bytes = r->snapshot().filter();
      absl::StatusOr<FilterView> v = FilterView::Parse(bytes);
      ASSERT_TRUE(v.ok()) << v.status();
      view = *v;
      pushed.clear();
      sequence = r->snapshot().sequence();
    } else if (r->has_push()) {
      ASSERT_TRUE(view.has_value()) << "a push before any snapshot";
      ASSERT_EQ(r->push().sequence(), sequence + 1) << "a gap";
      sequence = r->push().sequence();
      for (uint64_t h : r->push().item_hashes()) pushed.insert(h);
      for (uint64_t i = newest + 1; i <= last; ++i) {
        if (r->push().item_hashes(0) == HashItemId(i)) newest = i;
      }
    }
  }
  ASSERT_EQ(snapshots, 40);
  ASSERT_TRUE(view.has_value());
  for (uint64_t i = 1; i <= last; ++i) {
    ASSERT_TRUE(view->MayContainId(i) || pushed.count(HashItemId(i)))
        << "item " << i << " of " << last
        << " is neither in the last snapshot nor pushed after it";
  }
}

TEST_F(SessionStreamTest, CurrentVersionIsAnsweredNotModified) {
  ASSERT_TRUE(Record("homefeed", "u1", {1}).ok());
  const std::string version = Pull("homefeed", "u1").version();
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "homefeed", "u1", version));
  const v1::SessionSnapshot s = Expect(c).snapshot();
  EXPECT_TRUE(s.not_modified());
  EXPECT_TRUE(s.filter().empty());
  EXPECT_EQ(s.version(), version);
  ASSERT_TRUE(c.Subscribe(2, "homefeed", "u1", "0123456789abcdef"));
  const v1::SessionSnapshot full = Expect(c).snapshot();
  EXPECT_FALSE(full.not_modified());
  EXPECT_FALSE(full.filter().empty());
}

TEST_F(SessionStreamTest, ResubscribingSnapshotsAtTheCurrentSequence) {
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "homefeed", "u1"));
  ASSERT_TRUE(Expect(c).has_snapshot());
  ASSERT_TRUE(Record("homefeed", "u1", {1}).ok());
  ASSERT_TRUE(Record("homefeed", "u1", {2}).ok());
  EXPECT_EQ(Expect(c).push().sequence(), 1u);
  EXPECT_EQ(Expect(c).push().sequence(), 2u);
  ASSERT_TRUE(c.Subscribe(2, "homefeed", "u1"));
  const v1::SessionResponse again = Expect(c);
  EXPECT_EQ(again.request_id(), 2u);
  EXPECT_EQ(again.snapshot().sequence(), 2u);
  ASSERT_TRUE(Record("homefeed", "u1", {3}).ok());
  EXPECT_EQ(Expect(c).push().sequence(), 3u);
  EXPECT_EQ(Metric("exposure_filter_session_subscriptions"), 1);
}

TEST_F(SessionStreamTest, DeleteIsPushedAsAReset) {
  ASSERT_TRUE(Record("homefeed", "u1", {1}).ok());
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "homefeed", "u1"));
  ASSERT_TRUE(Expect(c).has_snapshot());
  v1::DeleteUserRequest del;
  del.set_surface("homefeed");
  del.set_user_id("u1");
  v1::DeleteUserResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->DeleteUser(&ctx, del, &resp).ok());
  const v1::SessionResponse r = Expect(c);
  ASSERT_TRUE(r.has_push()) << r.DebugString();
  EXPECT_TRUE(r.push().reset());
  EXPECT_EQ(r.push().sequence(), 1u);
  EXPECT_TRUE(r.push().item_hashes().empty());
}

TEST_F(SessionStreamTest, UnsubscribeIsAnsweredAndStopsThePushes) {
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "homefeed", "u1"));
  ASSERT_TRUE(Expect(c).has_snapshot());
  ASSERT_TRUE(c.Unsubscribe(2, "homefeed", "u1"));
  const v1::SessionResponse r = Expect(c);
  ASSERT_TRUE(r.has_unsubscribed()) << r.DebugString();
  EXPECT_EQ(r.request_id(), 2u);
  EXPECT_EQ(r.unsubscribed().reason(), v1::SessionUnsubscribed::REQUESTED);
  ASSERT_TRUE(Record("homefeed", "u1", {1}).ok());
  EXPECT_FALSE(c.Next(std::chrono::milliseconds(200)).has_value());
  EXPECT_EQ(Metric("exposure_filter_session_subscriptions"), 0);
  // Unsubscribing again is not an error.
  ASSERT_TRUE(c.Unsubscribe(3, "homefeed", "u1"));
  EXPECT_EQ(Expect(c).unsubscribed().reason(),
            v1::SessionUnsubscribed::REQUESTED);
}

TEST_F(SessionStreamTest, AQuietUnsubscribeStopsThePushesUnanswered) {
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "homefeed", "u1"));
  ASSERT_TRUE(Expect(c).has_snapshot());
  ASSERT_TRUE(c.Unsubscribe(2, "homefeed", "u1", /*quiet=*/true));
  // Nothing answers it: the next answer is the pong of a later ping, which
  // also says the server has read the unsubscribe (a write acknowledged
  // before that may still be pushed, as before an unsubscribed).
  ASSERT_TRUE(c.Ping(3));
  const v1::SessionResponse r = Expect(c);
  ASSERT_TRUE(r.has_pong()) << r.DebugString();
  EXPECT_EQ(r.request_id(), 3u);
  EXPECT_EQ(Metric("exposure_filter_session_subscriptions"), 0);
  // From then on no push.
  ASSERT_TRUE(Record("homefeed", "u1", {1}).ok());
  EXPECT_FALSE(c.Next(std::chrono::milliseconds(200)).has_value());
  // Quiet of a user not subscribed: nothing either.
  ASSERT_TRUE(c.Unsubscribe(4, "homefeed", "u1", /*quiet=*/true));
  ASSERT_TRUE(c.Ping(5));
  EXPECT_EQ(Expect(c).request_id(), 5u);
  // A refused one is still answered, naming the field.
  ASSERT_TRUE(c.Unsubscribe(6, "homefeed", "", /*quiet=*/true));
  const v1::SessionResponse e = Expect(c);
  ASSERT_TRUE(e.has_error()) << e.DebugString();
  EXPECT_EQ(e.request_id(), 6u);
  EXPECT_EQ(e.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(e.error().message(), "unsubscribe.user_id: empty");
}

TEST_F(SessionStreamTest, FilterOnTheStreamAnswersAsTheUnaryRpc) {
  ASSERT_TRUE(Record("homefeed", "u1", {1, 3}).ok());
  v1::FilterRecalledRequest f;
  f.set_surface("homefeed");
  f.set_user_id("u1");
  for (uint64_t id : {1, 2, 3, 4}) f.add_candidate_ids(id);
  v1::FilterRecalledResponse unary;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->FilterRecalled(&ctx, f, &unary).ok());
  SessionTestClient c(channel_);
  v1::SessionRequest r;
  r.set_request_id(42);
  *r.mutable_filter() = f;
  ASSERT_TRUE(c.Write(r));
  const v1::SessionResponse a = Expect(c);
  ASSERT_TRUE(a.has_filter()) << a.DebugString();
  EXPECT_EQ(a.request_id(), 42u);
  EXPECT_EQ(a.filter().SerializeAsString(), unary.SerializeAsString());
  EXPECT_THAT(a.filter().kept_ids(), ElementsAre(2, 4));
}

TEST_F(SessionStreamTest, PingIsAnsweredWithTheServerClock) {
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Ping(5));
  const v1::SessionResponse r = Expect(c);
  ASSERT_TRUE(r.has_pong()) << r.DebugString();
  EXPECT_EQ(r.request_id(), 5u);
  EXPECT_EQ(r.pong().server_time_ms(), kNowMs);
  EXPECT_FALSE(r.pong().lagging());
}

TEST_F(SessionStreamTest, APongIsQueuedBehindThePushesOfEarlierWrites) {
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "homefeed", "u1"));
  ASSERT_TRUE(Expect(c).has_snapshot());
  for (uint64_t i = 0; i < 50; ++i) {
    ASSERT_TRUE(Record("homefeed", "u1", {i}).ok());
  }
  ASSERT_TRUE(c.Ping(9));
  for (uint64_t i = 1; i <= 50; ++i) {
    const v1::SessionResponse r = Expect(c);
    ASSERT_TRUE(r.has_push()) << "before the pong: " << r.DebugString();
    ASSERT_EQ(r.push().sequence(), i);
  }
  EXPECT_TRUE(Expect(c).has_pong());
}

struct BadRequest {
  const char* name;
  std::function<void(v1::SessionRequest*)> fill;
  int code;
  const char* message;
};

TEST_F(SessionStreamTest, EachRefusedRequestNamesItsFieldAndTheStreamGoesOn) {
  const std::vector<BadRequest> cases = {
      {"empty user",
       [](v1::SessionRequest* r) { r->mutable_subscribe()->set_surface("h"); },
       3, "subscribe.user_id: empty"},
      {"bad surface",
       [](v1::SessionRequest* r) {
         r->mutable_subscribe()->set_surface("Bad!");
         r->mutable_subscribe()->set_user_id("u");
       },
       3, "subscribe.surface: "},
      {"long user",
       [](v1::SessionRequest* r) {
         r->mutable_subscribe()->set_user_id(std::string(300, 'u'));
       },
       3, "subscribe.user_id: "},
      {"long version",
       [](v1::SessionRequest* r) {
         r->mutable_subscribe()->set_user_id("u");
         r->mutable_subscribe()->set_if_version(std::string(65, 'a'));
       },
       3, "subscribe.if_version: longer than any version"},
      {"format 1 only",
       [](v1::SessionRequest* r) {
         r->mutable_subscribe()->set_user_id("u");
         r->mutable_subscribe()->add_accepted_formats(1);
       },
       9, "subscribe.accepted_formats: this server encodes filter format 2"},
      {"unsubscribe without user",
       [](v1::SessionRequest* r) { r->mutable_unsubscribe(); }, 3,
       "unsubscribe.user_id: empty"},
      {"filter without user",
       [](v1::SessionRequest* r) { r->mutable_filter()->add_candidate_ids(1); },
       3, "filter.user_id: empty"},
      {"nothing set", [](v1::SessionRequest*) {}, 3,
       "request: none of subscribe, unsubscribe, filter, ping is set"},
  };
  SessionTestClient c(channel_);
  uint64_t id = 100;
  for (const BadRequest& bad : cases) {
    SCOPED_TRACE(bad.name);
    v1::SessionRequest r;
    r.set_request_id(++id);
    bad.fill(&r);
    ASSERT_TRUE(c.Write(r));
    const v1::SessionResponse a = Expect(c);
    ASSERT_TRUE(a.has_error()) << a.DebugString();
    EXPECT_EQ(a.request_id(), id);
    EXPECT_EQ(a.error().code(), bad.code);
    EXPECT_THAT(a.error().message(), StartsWith(bad.message));
  }
  EXPECT_EQ(Metric("exposure_filter_session_subscriptions"), 0)
      << "a refused subscribe holds nothing";
  ASSERT_TRUE(c.Ping(1));
  EXPECT_TRUE(Expect(c).has_pong()) << "the stream goes on";
}

TEST_F(SessionStreamTest, UndecodableRequestEndsTheStreamNamingTheType) {
  auto generic = std::make_unique<grpc::GenericStub>(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      generic->PrepareCall(&ctx, "/exposure.v1.ExposureFilter/Session", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff";
  grpc::Slice slice(garbage);
  grpc::ByteBuffer bytes(&slice, 1);
  call->Write(bytes, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_FALSE(ok) << "no response, the end of the stream";
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              StartsWith("exposure.v1.SessionRequest: not a valid protobuf "
                         "message: "));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(SessionStreamTest, HalfCloseEndsTheStreamOk) {
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "homefeed", "u1"));
  ASSERT_TRUE(c.WritesDone());
  EXPECT_TRUE(Expect(c).has_snapshot()) << "what was queued is still sent";
  const grpc::Status s = c.Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Metric("exposure_filter_session_subscriptions"), 0);
}

TEST_F(SessionStreamTest, SubscriptionsPerStreamAreBounded) {
  server_.reset();
  ServerConfig config = TestConfig();
  config.session.max_subscriptions_per_stream = 2;
  StartServer(config);
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "h", "u1"));
  ASSERT_TRUE(c.Subscribe(2, "h", "u2"));
  ASSERT_TRUE(c.Subscribe(3, "h", "u3"));
  EXPECT_TRUE(Expect(c).has_snapshot());
  EXPECT_TRUE(Expect(c).has_snapshot());
  const v1::SessionResponse r = Expect(c);
  ASSERT_TRUE(r.has_error()) << r.DebugString();
  EXPECT_EQ(r.request_id(), 3u);
  EXPECT_EQ(r.error().code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.error().message(),
              HasSubstr("--session_max_subscriptions_per_stream"));
  ASSERT_TRUE(c.Subscribe(4, "h", "u1"));
  EXPECT_TRUE(Expect(c).has_snapshot()) << "renewing one held is not more";
}

TEST_F(SessionStreamTest, SubscriptionsOfTheServerAreBounded) {
  server_.reset();
  ServerConfig config = TestConfig();
  config.session.max_subscriptions = 1;
  config.session.max_subscriptions_per_stream = 1;
  StartServer(config);
  SessionTestClient a(channel_);
  SessionTestClient b(channel_);
  ASSERT_TRUE(a.Subscribe(1, "h", "u1"));
  EXPECT_TRUE(Expect(a).has_snapshot());
  ASSERT_TRUE(b.Subscribe(1, "h", "u2"));
  const v1::SessionResponse r = Expect(b);
  ASSERT_TRUE(r.has_error()) << r.DebugString();
  EXPECT_EQ(r.error().code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.error().message(), HasSubstr("--session_max_subscriptions "));
}

TEST_F(SessionStreamTest, StreamsAreBounded) {
  server_.reset();
  ServerConfig config = TestConfig();
  config.session.max_streams = 1;
  StartServer(config);
  SessionTestClient a(channel_);
  ASSERT_TRUE(a.Ping(1));
  EXPECT_TRUE(Expect(a).has_pong());
  SessionTestClient b(channel_);
  const grpc::Status s = b.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--session_max_streams"));
  EXPECT_EQ(
      Metric("exposure_filter_session_streams_ended_total", "reason", "limit"),
      1);
}

TEST_F(SessionStreamTest, AnIdleSubscriptionExpiresWithANotice) {
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "h", "u1"));
  ASSERT_TRUE(c.Subscribe(2, "h", "u2"));
  ASSERT_TRUE(Expect(c).has_snapshot());
  ASSERT_TRUE(Expect(c).has_snapshot());
  clock_.Advance(absl::Minutes(6));
  v1::SessionRequest f;  // a mode-A request renews u2's lease
  f.set_request_id(3);
  f.mutable_filter()->set_surface("h");
  f.mutable_filter()->set_user_id("u2");
  ASSERT_TRUE(c.Write(f));
  ASSERT_TRUE(Expect(c).has_filter());
  clock_.Advance(absl::Minutes(5));
  server_->session_hub().Tick(server_->store().clock().MonotonicMs());
  const v1::SessionResponse r = Expect(c);
  ASSERT_TRUE(r.has_unsubscribed()) << r.DebugString();
  EXPECT_EQ(r.unsubscribed().user_id(), "u1");
  EXPECT_EQ(r.unsubscribed().reason(), v1::SessionUnsubscribed::IDLE);
  EXPECT_EQ(Metric("exposure_filter_session_subscriptions"), 1);
  EXPECT_EQ(Metric("exposure_filter_session_subscriptions_expired_total"), 1);
  ASSERT_TRUE(Record("h", "u1", {1}).ok());
  ASSERT_TRUE(Record("h", "u2", {2}).ok());
  const v1::SessionResponse p = Expect(c);
  ASSERT_TRUE(p.has_push()) << p.DebugString();
  EXPECT_EQ(p.push().user_id(), "u2") << "u1 expired: no push";
}

TEST_F(SessionStreamTest, ShutdownEndsStreamsUnavailableAtOnce) {
  SessionTestClient c(channel_);
  ASSERT_TRUE(c.Subscribe(1, "h", "u1"));
  ASSERT_TRUE(Expect(c).has_snapshot());
  const auto start = std::chrono::steady_clock::now();
  std::thread stop([&] { server_->Shutdown(); });
  const grpc::Status s = c.Finish();
  stop.join();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("shutting down"));
  // Not the drain's grace (10 s here): the stream was ended, not waited on.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST_F(SessionStreamTest, MetricsCountStreamsRequestsAndPushes) {
  {
    SessionTestClient c(channel_);
    ASSERT_TRUE(c.Subscribe(1, "h", "u1"));
    ASSERT_TRUE(Expect(c).has_snapshot());
    EXPECT_EQ(Metric("exposure_filter_session_streams"), 1);
    ASSERT_TRUE(Record("h", "u1", {1, 2, 3}).ok());
    ASSERT_TRUE(Expect(c).has_push());
    EXPECT_EQ(Metric("exposure_filter_session_pushes_total"), 1);
    EXPECT_EQ(Metric("exposure_filter_session_pushed_items_total"), 3);
    EXPECT_EQ(Metric("exposure_filter_session_snapshots_total", "kind", "full"),
              1);
    EXPECT_EQ(
        Metric("exposure_filter_session_requests_total", "kind", "subscribe"),
        1);
    ASSERT_TRUE(c.WritesDone());
    EXPECT_TRUE(c.Finish().ok());
  }
  for (int i = 0; i < 100 && Metric("exposure_filter_session_streams") != 0;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Metric("exposure_filter_session_streams"), 0);
  EXPECT_EQ(Metric("exposure_filter_session_queue_bytes"), 0);
  EXPECT_EQ(
      Metric("exposure_filter_session_streams_ended_total", "reason", "client"),
      1);
}

}  // namespace
}  // namespace exposure_filter
