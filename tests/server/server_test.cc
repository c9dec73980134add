// The real ExposureFilterServer in-process on an ephemeral port, called
// through the generated stubs over a real channel: the transport mapping of
// every RPC, the health service, startup failures and shutdown.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/filter_view.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"

namespace exposure_filter {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kNowMs = 1'700'000'000'000;
constexpr char kServiceName[] = "exposure.v1.ExposureFilter";

// A new temporary data_dir per server, removed when the test binary exits:
// in-process servers are durable like the real one, never in ./data.
std::string FreshDataDir() {
  static std::vector<std::string>* dirs = [] {
    auto* v = new std::vector<std::string>;
    std::atexit([] {
      for (const std::string& d : *dirs) std::filesystem::remove_all(d);
    });
    return v;
  }();
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "ef_server_test_XXXXXX")
          .string();
  dirs->push_back(mkdtemp(tmpl.data()));
  return dirs->back();
}

ServerConfig TestConfig() {
  ServerConfig c;
  c.durability.data_dir = FreshDataDir();
  c.listen_address = "127.0.0.1:0";
  c.shards = 4;
  // Only matters for a test that shuts down with a stream open.
  c.shutdown_grace = absl::Seconds(2);
  return c;
}

// A deadline only so a broken server fails the test instead of hanging it
// (sanitizer builds are slow; nothing here measures time).
void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(60));
}

// Binds a plain listening socket (no SO_REUSEPORT) on an ephemeral port.
class PortHolder {
 public:
  PortHolder() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ok_ = fd_ >= 0 &&
          bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          listen(fd_, 1) == 0;
    socklen_t len = sizeof(addr);
    if (ok_ &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~PortHolder() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_ && port_ != 0; }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  int port_ = 0;
};

class ExposureFilterServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
        ExposureFilterServer::Start(TestConfig(), &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = exposure::v1::ExposureFilter::NewStub(channel_);
    health_ = Health::NewStub(channel_);
  }

  HealthCheckResponse::ServingStatus CheckHealth(const std::string& service,
                                                 grpc::Status* status) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse resp;
    *status = health_->Check(&ctx, req, &resp);
    return resp.status();
  }

  ManualClock clock_{kNowMs};
  std::unique_ptr<ExposureFilterServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<exposure::v1::ExposureFilter::Stub> stub_;
  std::unique_ptr<Health::Stub> health_;
};

TEST_F(ExposureFilterServerTest, EveryRpcRoundTrips) {
  {
    exposure::v1::RecordExposureRequest req;
    req.set_surface("homefeed");
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id("alice");
    e->add_item_ids(1);
    e->add_item_ids(2);
    e->add_item_keys("k");
    exposure::v1::RecordExposureResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub_->RecordExposure(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.items_recorded(), 3u);
    EXPECT_EQ(resp.items_expired(), 0u);
  }
  {
    exposure::v1::FilterRecalledRequest req;
    req.set_surface("homefeed");
    req.set_user_id("alice");
    for (uint64_t id : {5, 1, 2, 6}) req.add_candidate_ids(id);
    req.add_candidate_keys("k");
    req.add_candidate_keys("q");
    exposure::v1::FilterRecalledResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub_->FilterRecalled(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_THAT(resp.kept_ids(), ElementsAre(5, 6));
    EXPECT_THAT(resp.kept_keys(), ElementsAre("q"));
    EXPECT_EQ(resp.removed_count(), 3u);

    req.set_mode(exposure::v1::KEEP_MASK);
    exposure::v1::FilterRecalledResponse mask;
    grpc::ClientContext ctx2;
    SetDeadline(&ctx2);
    ASSERT_TRUE(stub_->FilterRecalled(&ctx2, req, &mask).ok());
    // Candidates 5,1,2,6,"k","q": kept bits 0, 3 and 5.
    EXPECT_EQ(mask.keep_mask(), std::string("\x29", 1));
  }
  std::string version;
  {
    exposure::v1::GetFilterRequest req;
    req.set_surface("homefeed");
    req.set_user_id("alice");
    exposure::v1::GetFilterResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub_->GetFilter(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    absl::StatusOr<FilterView> view = FilterView::Parse(resp.filter());
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_TRUE(view->MayContainId(1));
    EXPECT_TRUE(view->MayContainKey("k").value_or(false));
    version = resp.version();

    req.set_if_version(version);
    grpc::ClientContext ctx2;
    SetDeadline(&ctx2);
    ASSERT_TRUE(stub_->GetFilter(&ctx2, req, &resp).ok());
    EXPECT_TRUE(resp.not_modified());
    EXPECT_TRUE(resp.filter().empty());
  }
  {
    exposure::v1::GetUserStatsRequest req;
    req.set_surface("homefeed");
    req.set_user_id("alice");
    exposure::v1::GetUserStatsResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub_->GetUserStats(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(resp.exists());
    EXPECT_EQ(resp.items(), 3u);
    EXPECT_EQ(resp.slices(), 1u);
    EXPECT_EQ(resp.newest_exposure_ms(), kNowMs);
  }
  {
    exposure::v1::GetServerStatsResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub_->GetServerStats(&ctx, {}, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.users(), 1u);
    EXPECT_EQ(resp.shards(), 4u);
    EXPECT_EQ(resp.items_recorded(), 3u);
    EXPECT_EQ(resp.candidates_checked(), 12u);
    EXPECT_EQ(resp.candidates_removed(), 6u);
    ASSERT_EQ(resp.surface_stats_size(), 1);
    EXPECT_EQ(resp.surface_stats(0).surface(), "homefeed");
  }
  {
    exposure::v1::DeleteUserRequest req;
    req.set_surface("homefeed");
    req.set_user_id("alice");
    exposure::v1::DeleteUserResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub_->DeleteUser(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(resp.existed());
  }
  EXPECT_EQ(server_->store().Usage(1).users, 0u);
}

TEST_F(ExposureFilterServerTest, InvalidArgumentReachesTheClientWithTheField) {
  exposure::v1::RecordExposureRequest req;
  req.add_exposures()->set_user_id("alice");
  req.mutable_exposures(0)->add_item_ids(1);
  req.add_exposures()->set_event_time_ms(kNowMs);  // no user id
  exposure::v1::RecordExposureResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  const grpc::Status s = stub_->RecordExposure(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), StartsWith("exposures[1].user_id: "));
  EXPECT_EQ(server_->store().Usage(1).users, 0u);

  exposure::v1::FilterRecalledRequest freq;
  freq.set_user_id("alice");
  freq.set_mode(static_cast<exposure::v1::ResultMode>(7));
  exposure::v1::FilterRecalledResponse fresp;
  grpc::ClientContext ctx2;
  SetDeadline(&ctx2);
  const grpc::Status fs = stub_->FilterRecalled(&ctx2, freq, &fresp);
  EXPECT_EQ(fs.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(fs.error_message(), StartsWith("mode: "));
}

TEST_F(ExposureFilterServerTest, HealthServiceReportsServing) {
  grpc::Status status;
  EXPECT_EQ(CheckHealth("", &status), HealthCheckResponse::SERVING);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(CheckHealth(kServiceName, &status), HealthCheckResponse::SERVING);
  EXPECT_TRUE(status.ok()) << status.error_message();
  CheckHealth("no.such.Service", &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ExposureFilterServerTest, HealthWatchSeesNotServingOnShutdown) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  HealthCheckRequest req;
  req.set_service(kServiceName);
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> watch =
      health_->Watch(&ctx, req);
  HealthCheckResponse resp;
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);

  // Shutdown blocks while the watch is open (up to shutdown_grace), so it
  // runs beside the reader.
  std::thread shutdown([this] { server_->Shutdown(); });
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);
  ctx.TryCancel();
  while (watch->Read(&resp)) {
  }
  watch->Finish().IgnoreError();
  shutdown.join();
}

TEST_F(ExposureFilterServerTest, ShutdownCompletesWithAnIdleClient) {
  grpc::Status status;
  ASSERT_EQ(CheckHealth("", &status), HealthCheckResponse::SERVING);
  // The channel stays connected and idle while the server goes away.
  server_->Shutdown();
  server_->Shutdown();  // idempotent
  server_->Wait();

  exposure::v1::GetServerStatsResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  const grpc::Status s = stub_->GetServerStats(&ctx, {}, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST(ExposureFilterServerStartTest, FailsWhenThePortIsTaken) {
  PortHolder holder;
  ASSERT_TRUE(holder.ok());
  ServerConfig config = TestConfig();
  config.listen_address = absl::StrCat("127.0.0.1:", holder.port());
  ManualClock clock(kNowMs);
  absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
      ExposureFilterServer::Start(config, &clock);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr(config.listen_address));
}

TEST(ExposureFilterServerStartTest, FailsWhenAnotherServerHoldsThePort) {
  // Two instances must never share a port: each has its own in-memory
  // filters, so splitting traffic between them would lose exposures.
  ManualClock clock(kNowMs);
  absl::StatusOr<std::unique_ptr<ExposureFilterServer>> first =
      ExposureFilterServer::Start(TestConfig(), &clock);
  ASSERT_TRUE(first.ok()) << first.status();
  ServerConfig config = TestConfig();
  config.listen_address = absl::StrCat("127.0.0.1:", (*first)->port());
  absl::StatusOr<std::unique_ptr<ExposureFilterServer>> second =
      ExposureFilterServer::Start(config, &clock);
  EXPECT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

TEST(ExposureFilterServerStartTest, RejectsShardsThatAreNotAPowerOfTwo) {
  ManualClock clock(kNowMs);
  for (int shards : {0, 3, 12, -4, 131072}) {
    ServerConfig config = TestConfig();
    config.shards = shards;
    absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
        ExposureFilterServer::Start(config, &clock);
    ASSERT_FALSE(server.ok()) << shards;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(server.status().message()),
                HasSubstr(absl::StrCat("shards must be a power of two")));
    EXPECT_THAT(std::string(server.status().message()),
                HasSubstr(absl::StrCat(shards)));
  }
}

TEST(ExposureFilterServerStartTest, RejectsAnInvalidSurfacePolicy) {
  ManualClock clock(kNowMs);
  ServerConfig config = TestConfig();
  FilterPolicyOptions bad;
  bad.fp_rate = 0.9;
  config.surface_overrides = {{"video", bad}};
  absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
      ExposureFilterServer::Start(config, &clock);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("video"));
}

TEST(ExposureFilterServerStartTest, RefusesADataDirAnotherServerHolds) {
  ManualClock clock(kNowMs);
  const ServerConfig config = TestConfig();
  absl::StatusOr<std::unique_ptr<ExposureFilterServer>> first =
      ExposureFilterServer::Start(config, &clock);
  ASSERT_TRUE(first.ok()) << first.status();
  ServerConfig same_dir = TestConfig();
  same_dir.durability.data_dir = config.durability.data_dir;
  absl::StatusOr<std::unique_ptr<ExposureFilterServer>> second =
      ExposureFilterServer::Start(same_dir, &clock);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use"));
}

TEST(ExposureFilterServerStartTest, ARestartedServerKeepsAcknowledgedWrites) {
  ManualClock clock(kNowMs);
  const ServerConfig config = TestConfig();
  for (int life = 0; life < 2; ++life) {
    absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
        ExposureFilterServer::Start(config, &clock);
    ASSERT_TRUE(server.ok()) << server.status();
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                            grpc::InsecureChannelCredentials());
    auto stub = exposure::v1::ExposureFilter::NewStub(channel);
    if (life == 0) {
      exposure::v1::RecordExposureRequest req;
      exposure::v1::Exposure* e = req.add_exposures();
      e->set_user_id("u1");
      e->add_item_ids(101);
      e->add_item_keys("video:9");
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      exposure::v1::RecordExposureResponse resp;
      ASSERT_TRUE(stub->RecordExposure(&ctx, req, &resp).ok());
      (*server)->Shutdown();  // final snapshot
    } else {
      EXPECT_EQ((*server)->recovery().users_loaded, 1u);
      EXPECT_EQ((*server)->recovery().wal_records, 0u);
      exposure::v1::FilterRecalledRequest req;
      req.set_user_id("u1");
      req.add_candidate_ids(101);
      req.add_candidate_ids(102);
      req.add_candidate_keys("video:9");
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      exposure::v1::FilterRecalledResponse resp;
      ASSERT_TRUE(stub->FilterRecalled(&ctx, req, &resp).ok());
      EXPECT_THAT(resp.kept_ids(), ElementsAre(102));
      EXPECT_EQ(resp.kept_keys_size(), 0);
    }
  }
}

}  // namespace
}  // namespace exposure_filter
