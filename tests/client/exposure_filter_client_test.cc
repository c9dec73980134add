// ExposureFilterClient: calls through to the real server in-process, and the
// deadline/retry contract against a scripted fake (every attempt counted).
#include "exposure_filter/exposure_filter_client.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tests/client/fake_exposure_filter_service.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kNowMs = 1'700'000'000'000;

// Generous: sanitizer builds are slow and nothing here measures time.
ClientOptions TestOptions() {
  ClientOptions o;
  o.deadline = absl::Seconds(30);
  o.initial_backoff = absl::Milliseconds(1);
  o.max_backoff = absl::Milliseconds(5);
  return o;
}

class ClientAgainstServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig c;
    c.listen_address = "127.0.0.1:0";
    c.shards = 4;
    auto server = ExposureFilterServer::Start(c, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto client = ExposureFilterClient::Connect(
        absl::StrCat("127.0.0.1:", server_->port()),
        grpc::InsecureChannelCredentials(), TestOptions());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  ManualClock clock_{kNowMs};
  std::unique_ptr<ExposureFilterServer> server_;
  std::unique_ptr<ExposureFilterClient> client_;
};

TEST_F(ClientAgainstServerTest, RecordThenFilterRoundTrips) {
  exposure::v1::RecordExposureRequest rec;
  exposure::v1::Exposure* e = rec.add_exposures();
  e->set_user_id("alice");
  e->add_item_ids(1);
  e->add_item_ids(2);
  auto recorded = client_->RecordExposure(rec);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(recorded->items_recorded(), 2u);

  exposure::v1::FilterRecalledRequest req;
  req.set_user_id("alice");
  for (uint64_t id : {1, 2, 3}) req.add_candidate_ids(id);
  auto filtered = client_->FilterRecalled(req);
  ASSERT_TRUE(filtered.ok()) << filtered.status();
  EXPECT_THAT(filtered->kept_ids(), ElementsAre(3u));

  auto stats = client_->GetServerStats({});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->users(), 1u);
}

TEST_F(ClientAgainstServerTest, ServerErrorsKeepTheirCodeAndFieldMessage) {
  exposure::v1::FilterRecalledRequest req;  // no user_id
  auto r = client_->FilterRecalled(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("user_id: "));
}

TEST(ClientOptionsTest, InvalidOptionsAreRefusedNamingTheField) {
  ClientOptions o;
  o.max_attempts = 6;
  auto c = ExposureFilterClient::Connect("127.0.0.1:1",
                                         grpc::InsecureChannelCredentials(), o);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), StartsWith("max_attempts"));
  o = ClientOptions{};
  o.deadline = absl::ZeroDuration();
  EXPECT_FALSE(ValidateClientOptions(o).ok());
  o = ClientOptions{};
  o.max_backoff = absl::Milliseconds(1);
  EXPECT_FALSE(ValidateClientOptions(o).ok());
  o = ClientOptions{};
  o.max_reconnect_backoff = absl::Milliseconds(50);
  EXPECT_THAT(std::string(ValidateClientOptions(o).message()),
              StartsWith("initial_reconnect_backoff"));
  EXPECT_TRUE(ValidateClientOptions(ClientOptions{}).ok());
}

// A restarted replica must be dialled again within max_reconnect_backoff,
// not gRPC's default 120 s (the failover drill's rolling restart).
TEST(ClientOptionsTest, ChannelCarriesTheReconnectBackoff) {
  ClientOptions o;
  o.initial_reconnect_backoff = absl::Milliseconds(70);
  o.max_reconnect_backoff = absl::Milliseconds(900);
  const grpc::ChannelArguments channel_args = ClientChannelArguments(o);
  const grpc_channel_args args = channel_args.c_channel_args();
  int initial = -1;
  int max = -1;
  for (size_t i = 0; i < args.num_args; ++i) {
    const std::string key = args.args[i].key;
    if (key == GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS) {
      initial = args.args[i].value.integer;
    }
    if (key == GRPC_ARG_MAX_RECONNECT_BACKOFF_MS) {
      max = args.args[i].value.integer;
    }
  }
  EXPECT_EQ(initial, 70);
  EXPECT_EQ(max, 900);
}

TEST(ClientOptionsTest, ServiceConfigRetriesOnlyUnavailable) {
  ClientOptions o;
  o.max_attempts = 4;
  const std::string json = RetryServiceConfigJson(o);
  EXPECT_THAT(json, HasSubstr("\"maxAttempts\": 4"));
  EXPECT_THAT(json, HasSubstr("\"retryableStatusCodes\": [\"UNAVAILABLE\"]"));
  EXPECT_THAT(json, HasSubstr("\"initialBackoff\": \"0.050000s\""));
  o.max_attempts = 1;
  EXPECT_EQ(RetryServiceConfigJson(o), "{}");
}

class ClientAgainstFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    fake_.hold = false;
    if (!fake_.release.HasBeenNotified()) fake_.release.Notify();
    server_->Shutdown();
  }

  std::unique_ptr<ExposureFilterClient> Client(const ClientOptions& o) {
    auto c =
        ExposureFilterClient::Connect(absl::StrCat("127.0.0.1:", port_),
                                      grpc::InsecureChannelCredentials(), o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  FakeExposureFilterService fake_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(ClientAgainstFakeTest, UnavailableIsRetriedUntilItSucceeds) {
  fake_.fail_first = 2;
  ClientOptions o = TestOptions();
  o.max_attempts = 3;
  auto r = Client(o)->RecordExposure({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items_recorded(), 1u);
  EXPECT_EQ(fake_.calls, 3);
}

TEST_F(ClientAgainstFakeTest, RetriesAreBoundedByMaxAttempts) {
  fake_.fail_first = 100;
  ClientOptions o = TestOptions();
  o.max_attempts = 4;
  auto r = Client(o)->RecordExposure({});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake_.calls, 4);
}

TEST_F(ClientAgainstFakeTest, OneAttemptMeansNoRetry) {
  fake_.fail_first = 100;
  ClientOptions o = TestOptions();
  o.max_attempts = 1;
  EXPECT_EQ(Client(o)->RecordExposure({}).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake_.calls, 1);
}

TEST_F(ClientAgainstFakeTest, OtherErrorsAreNotRetried) {
  fake_.fail_first = 100;
  fake_.fail_code = grpc::StatusCode::INVALID_ARGUMENT;
  auto r = Client(TestOptions())->RecordExposure({});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "scripted");
  EXPECT_EQ(fake_.calls, 1);
}

TEST_F(ClientAgainstFakeTest, TheDeadlineEndsACallTheServerNeverAnswers) {
  fake_.hold = true;
  ClientOptions o = TestOptions();
  o.deadline = absl::Milliseconds(100);
  auto r = Client(o)->RecordExposure({});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  fake_.release.Notify();
}

TEST(ClientWithoutServerTest, NothingListeningIsUnavailableAfterRetries) {
  // Port 1 on loopback: connection refused, nothing to wait for.
  ClientOptions o = TestOptions();
  o.max_attempts = 5;
  auto c = ExposureFilterClient::Connect("127.0.0.1:1",
                                         grpc::InsecureChannelCredentials(), o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->GetFilter({}).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace exposure_filter
