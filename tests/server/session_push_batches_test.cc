// Push batches on the session stream (docs/session-stream.md "pushes"): a
// client that opted in with the call metadata and did not read while its
// user was written to gets the queued pushes as SessionResponse{pushes},
// each batch within its bounds, the pushes in sequence with every item, and
// an answer queued behind them still behind them; a client that did not
// opt in gets the same pushes one message each.
#include "exposure_filter/session_push_batches.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/item_hash.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/server/session_stream.h"
#include "src/store/clock.h"
#include "tests/server/session_test_client.h"

namespace exposure_filter {
namespace {

namespace v1 = exposure::v1;
using testing::RecordItems;
using testing::SessionTestClient;

constexpr int64_t kNowMs = 1'700'000'000'000;

const std::vector<std::pair<std::string, std::string>> kOptIn = {
    {kSessionPushBatchesMetadataKey, kSessionPushBatchesMetadataValue}};

// A channel of its own (its own connection) whose transport holds little
// for a stream the application does not read, as the backpressure test's:
// the server's writes then stall after a few pushes and the rest wait in
// the stream's queue, which is what a batch is made of.
std::shared_ptr<grpc::Channel> NarrowWindowChannel(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

// What one stream received up to the pong answering `ping_id`.
struct Received {
  std::vector<v1::SessionPush> pushes;  // in stream order, batches unrolled
  std::vector<int> batch_sizes;         // pushes per SessionPushes message
  int single_pushes = 0;
  bool pong = false;
  bool other = false;  // anything but pushes before the pong
};

Received ReadUntilPong(SessionTestClient* c, uint64_t ping_id) {
  Received got;
  while (std::optional<v1::SessionResponse> r = c->Next()) {
    if (r->has_push()) {
      ++got.single_pushes;
      got.pushes.push_back(r->push());
    } else if (r->has_pushes()) {
      EXPECT_EQ(r->request_id(), 0u);
      EXPECT_LE(r->pushes().ByteSizeLong(), SessionStream::kMaxBatchBytes);
      got.batch_sizes.push_back(r->pushes().pushes_size());
      for (const v1::SessionPush& p : r->pushes().pushes()) {
        got.pushes.push_back(p);
      }
    } else if (r->has_pong() && r->request_id() == ping_id) {
      got.pong = true;
      return got;
    } else {
      got.other = true;
    }
  }
  return got;
}

class SessionPushBatchesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
        ExposureFilterServer::Start(testing::SessionTestConfig(), &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::ExposureFilter::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials()));
  }

  void Record(const std::string& user, uint64_t first, int n) {
    ASSERT_TRUE(RecordItems(stub_.get(), user, first, n));
  }

  ManualClock clock_{kNowMs};
  std::unique_ptr<ExposureFilterServer> server_;
  std::unique_ptr<v1::ExposureFilter::Stub> stub_;
};

TEST_F(SessionPushBatchesTest, AReaderThatOptedInGetsQueuedPushesBatched) {
  SessionTestClient batched(NarrowWindowChannel(server_->port()),
                            /*start_reading=*/true, kOptIn);
  SessionTestClient single(NarrowWindowChannel(server_->port()));
  for (SessionTestClient* c : {&batched, &single}) {
    ASSERT_TRUE(c->Subscribe(1, "h", "u1"));
    std::optional<v1::SessionResponse> snap = c->Next();
    ASSERT_TRUE(snap.has_value() && snap->has_snapshot());
    EXPECT_EQ(snap->snapshot().sequence(), 0u);
    c->PauseReading();
  }
  // 600 pushes of 20 items (~200 bytes each, 120 KB): far past what the
  // transports take without the clients reading, within the default queue
  // budget (no resync), and more than one batch's 256 pushes.
  constexpr int kItems = 20;
  constexpr int kWrites = 600;
  for (int w = 0; w < kWrites; ++w) Record("u1", 1'000 + w * kItems, kItems);
  // Queued behind every push: answered only once they are all sent.
  ASSERT_TRUE(batched.Ping(2));
  ASSERT_TRUE(single.Ping(2));
  EXPECT_EQ(server_->session_hub().counters().resyncs, 0u);
  batched.ResumeReading();
  single.ResumeReading();

  std::set<uint64_t> want_hashes;
  for (int i = 0; i < kWrites * kItems; ++i) {
    want_hashes.insert(HashItemId(1'000 + i));
  }
  for (SessionTestClient* c : {&batched, &single}) {
    const bool opted_in = c == &batched;
    SCOPED_TRACE(opted_in ? "opted in" : "not opted in");
    const Received got = ReadUntilPong(c, 2);
    EXPECT_TRUE(got.pong) << "no pong after the pushes";
    EXPECT_FALSE(got.other);
    ASSERT_EQ(got.pushes.size(), static_cast<size_t>(kWrites));
    std::set<uint64_t> hashes;
    for (size_t i = 0; i < got.pushes.size(); ++i) {
      const v1::SessionPush& p = got.pushes[i];
      EXPECT_EQ(p.user_id(), "u1");
      ASSERT_EQ(p.sequence(), i + 1) << "a gap at push " << i;
      EXPECT_EQ(p.item_hashes_size(), kItems);
      hashes.insert(p.item_hashes().begin(), p.item_hashes().end());
    }
    EXPECT_EQ(hashes, want_hashes);
    if (opted_in) {
      ASSERT_FALSE(got.batch_sizes.empty()) << "no batch at all";
      const int largest =
          *std::max_element(got.batch_sizes.begin(), got.batch_sizes.end());
      EXPECT_GT(largest, 1);
      EXPECT_LE(largest, static_cast<int>(SessionStream::kMaxBatchPushes));
      for (int n : got.batch_sizes) EXPECT_GE(n, 2) << "a batch of one";
      std::printf("opted in: %zu batches (largest %d), %d single pushes\n",
                  got.batch_sizes.size(), largest, got.single_pushes);
    } else {
      EXPECT_TRUE(got.batch_sizes.empty()) << "a batch without opting in";
      EXPECT_EQ(got.single_pushes, kWrites);
    }
  }
}

// One RecordExposure naming several subscribed users queues all their
// pushes before the stream writes any, so the batch does not depend on the
// transport's windows: exactly one, each user's pushes in its sequence.
TEST_F(SessionPushBatchesTest, OneWriteToSeveralUsersIsOneBatch) {
  SessionTestClient c(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                          grpc::InsecureChannelCredentials()),
      /*start_reading=*/true, kOptIn);
  constexpr int kUsers = 5;
  for (int u = 0; u < kUsers; ++u) {
    ASSERT_TRUE(c.Subscribe(1 + u, "h", absl::StrCat("u", u)));
    std::optional<v1::SessionResponse> snap = c.Next();
    ASSERT_TRUE(snap.has_value() && snap->has_snapshot());
  }
  v1::RecordExposureRequest req;
  req.set_surface("h");
  for (int round = 0; round < 2; ++round) {
    for (int u = 0; u < kUsers; ++u) {
      v1::Exposure* e = req.add_exposures();
      e->set_user_id(absl::StrCat("u", u));
      e->add_item_ids(100 * round + u);
    }
  }
  v1::RecordExposureResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->RecordExposure(&ctx, req, &resp).ok());
  ASSERT_TRUE(c.Ping(100));
  const Received got = ReadUntilPong(&c, 100);
  EXPECT_TRUE(got.pong);
  EXPECT_FALSE(got.other);
  EXPECT_EQ(got.single_pushes, 0);
  ASSERT_EQ(got.batch_sizes.size(), 1u);
  ASSERT_EQ(got.pushes.size(), 2u * kUsers);
  std::vector<uint64_t> last(kUsers, 0);
  for (const v1::SessionPush& p : got.pushes) {
    const int u = p.user_id()[1] - '0';
    EXPECT_EQ(p.sequence(), last[u] + 1) << p.user_id();
    last[u] = p.sequence();
    ASSERT_EQ(p.item_hashes_size(), 1);
    EXPECT_EQ(p.item_hashes(0), HashItemId(100 * (p.sequence() - 1) + u));
  }
  for (int u = 0; u < kUsers; ++u) EXPECT_EQ(last[u], 2u);
  const SessionCounters n = server_->session_hub().counters();
  EXPECT_EQ(n.push_batches, 1u);
  EXPECT_EQ(n.pushes_batched, 2u * kUsers);
}

// Metadata with another value is not an opt-in: a client that would not
// read batches must never get one.
TEST_F(SessionPushBatchesTest, OnlyTheValueOneOptsIn) {
  SessionTestClient c(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                          grpc::InsecureChannelCredentials()),
      /*start_reading=*/true, {{kSessionPushBatchesMetadataKey, "0"}});
  ASSERT_TRUE(c.Subscribe(1, "h", "u0"));
  ASSERT_TRUE(c.Subscribe(2, "h", "u1"));
  for (int i = 0; i < 2; ++i) {
    std::optional<v1::SessionResponse> snap = c.Next();
    ASSERT_TRUE(snap.has_value() && snap->has_snapshot());
  }
  v1::RecordExposureRequest req;
  req.set_surface("h");
  for (const char* user : {"u0", "u1"}) {
    v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(7);
  }
  v1::RecordExposureResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->RecordExposure(&ctx, req, &resp).ok());
  ASSERT_TRUE(c.Ping(3));
  const Received got = ReadUntilPong(&c, 3);
  EXPECT_TRUE(got.pong);
  EXPECT_TRUE(got.batch_sizes.empty());
  EXPECT_EQ(got.single_pushes, 2);
}

}  // namespace
}  // namespace exposure_filter
