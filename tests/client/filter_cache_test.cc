// FilterCache: pull mode against the real server in-process (revalidation
// with if_version, local answers equal FilterRecalled, LRU bound), and
// corrupt or inconsistent answers from a scripted fake.
#include "exposure_filter/filter_cache.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tests/client/fake_exposure_filter_service.h"

namespace exposure_filter {
namespace {

constexpr int64_t kNowMs = 1'700'000'000'000;

ClientOptions TestOptions() {
  ClientOptions o;
  o.deadline = absl::Seconds(30);
  o.initial_backoff = absl::Milliseconds(1);
  o.max_backoff = absl::Milliseconds(5);
  return o;
}

class FilterCacheAgainstServerTest : public ::testing::Test {
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

  void Record(const std::string& user, std::vector<uint64_t> ids) {
    exposure::v1::RecordExposureRequest req;
    req.set_surface("homefeed");
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    for (uint64_t id : ids) e->add_item_ids(id);
    ASSERT_TRUE(client_->RecordExposure(req).ok());
  }

  ManualClock clock_{kNowMs};
  std::unique_ptr<ExposureFilterServer> server_;
  std::unique_ptr<ExposureFilterClient> client_;
};

TEST_F(FilterCacheAgainstServerTest,
       RevalidatesWithIfVersionAndRepullsOnChange) {
  FilterCache cache(client_.get(), {});
  Record("alice", {1, 2, 3});
  auto first = cache.Get("homefeed", "alice");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE((*first)->view().MayContainId(2));
  EXPECT_EQ(cache.stats().full_pulls, 1u);

  auto second = cache.Get("homefeed", "alice");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->get(), first->get()) << "unchanged: the cached copy";
  EXPECT_EQ(cache.stats().not_modified, 1u);
  EXPECT_EQ(cache.stats().full_pulls, 1u);

  Record("alice", {4});
  auto third = cache.Get("homefeed", "alice");
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_NE((*third)->version(), (*first)->version());
  EXPECT_TRUE((*third)->view().MayContainId(4));
  EXPECT_FALSE((*first)->view().MayContainId(4)) << "old copy stays intact";
  EXPECT_EQ(cache.stats().full_pulls, 2u);

  exposure::v1::DeleteUserRequest del;
  del.set_surface("homefeed");
  del.set_user_id("alice");
  ASSERT_TRUE(client_->DeleteUser(del).ok());
  auto fourth = cache.Get("homefeed", "alice");
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_TRUE((*fourth)->view().segments().empty());
  EXPECT_EQ(cache.stats().errors, 0u);
}

TEST_F(FilterCacheAgainstServerTest, LocalAnswersEqualFilterRecalled) {
  std::vector<uint64_t> exposed;
  for (uint64_t id = 0; id < 3000; id += 3) exposed.push_back(id);
  Record("bob", exposed);
  FilterCache cache(client_.get(), {});
  auto f = cache.Get("homefeed", "bob");
  ASSERT_TRUE(f.ok()) << f.status();

  exposure::v1::FilterRecalledRequest req;
  req.set_surface("homefeed");
  req.set_user_id("bob");
  req.set_mode(exposure::v1::KEEP_MASK);
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 6000; ++id) ids.push_back(id * 7919 % 9001);
  for (uint64_t id : ids) req.add_candidate_ids(id);
  auto resp = client_->FilterRecalled(req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  std::vector<uint8_t> keep(ids.size());
  (*f)->view().KeepMaskIds(ids, keep.data());
  int removed = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool server_keeps = (resp->keep_mask()[i / 8] >> (i % 8)) & 1;
    ASSERT_EQ(keep[i] != 0, server_keeps) << "candidate " << ids[i];
    removed += !server_keeps;
  }
  EXPECT_GE(removed, 600);  // ~6000 * (3000 / 9001) / 3 exposed
}

TEST_F(FilterCacheAgainstServerTest, HoldsAtMostMaxUsers) {
  FilterCache cache(client_.get(), {.max_users = 2});
  for (const char* user : {"u1", "u2", "u3"}) {
    ASSERT_TRUE(cache.Get("homefeed", user).ok());
  }
  EXPECT_EQ(cache.size(), 2u);
  // u1 was evicted: pulled whole again, not revalidated.
  ASSERT_TRUE(cache.Get("homefeed", "u1").ok());
  EXPECT_EQ(cache.stats().full_pulls, 4u);
  EXPECT_EQ(cache.stats().not_modified, 0u);
  ASSERT_TRUE(cache.Get("homefeed", "u1").ok());
  EXPECT_EQ(cache.stats().not_modified, 1u);
  cache.Invalidate("homefeed", "u1");
  EXPECT_EQ(cache.size(), 1u);
}

TEST_F(FilterCacheAgainstServerTest, ConcurrentGetsShareOneConsistentCache) {
  Record("shared", {1, 2, 3});
  FilterCache cache(client_.get(), {.max_users = 3});
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        // Everyone reads "shared"; the private users churn the LRU.
        auto f = cache.Get("homefeed", i % 2 ? "shared" : absl::StrCat("u", t));
        if (!f.ok() || (i % 2 && !(*f)->view().MayContainId(2))) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  EXPECT_LE(cache.size(), 3u);
  const FilterCacheStats st = cache.stats();
  EXPECT_EQ(st.full_pulls + st.not_modified, 100u);
  EXPECT_EQ(st.errors, 0u);
}

TEST_F(FilterCacheAgainstServerTest, ServerErrorsPassThrough) {
  FilterCache cache(client_.get(), {});
  auto f = cache.Get("homefeed", "");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.stats().errors, 1u);
  EXPECT_EQ(cache.size(), 0u);
}

class FilterCacheAgainstFakeTest : public ::testing::Test {
 protected:
  void Start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    auto c = ExposureFilterClient::Connect(absl::StrCat("127.0.0.1:", port_),
                                           grpc::InsecureChannelCredentials(),
                                           TestOptions());
    ASSERT_TRUE(c.ok());
    client_ = *std::move(c);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  FakeExposureFilterService fake_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ExposureFilterClient> client_;
  int port_ = 0;
};

TEST_F(FilterCacheAgainstFakeTest, CorruptBytesAreDataLossAndNotCached) {
  fake_.get_filter_answer.set_filter("EXPF but not a filter");
  fake_.get_filter_answer.set_version("0000000000000000");
  Start();
  FilterCache cache(client_.get(), {});
  auto f = cache.Get("homefeed", "alice");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.stats().errors, 1u);
}

TEST_F(FilterCacheAgainstFakeTest, NotModifiedForAVersionNotHeldIsDataLoss) {
  fake_.get_filter_answer.set_not_modified(true);
  fake_.get_filter_answer.set_version("0123456789abcdef");
  Start();
  FilterCache cache(client_.get(), {});
  auto f = cache.Get("homefeed", "alice");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
}

TEST(PulledFilterTest, BytesMustMatchTheAnnouncedVersion) {
  // The empty filter of the default policy, as any server encodes it.
  ServerConfig c;
  ManualClock clock(kNowMs);
  c.listen_address = "127.0.0.1:0";
  c.shards = 1;
  auto server = ExposureFilterServer::Start(c, &clock);
  ASSERT_TRUE(server.ok());
  auto client = ExposureFilterClient::Connect(
      absl::StrCat("127.0.0.1:", (*server)->port()),
      grpc::InsecureChannelCredentials(), TestOptions());
  ASSERT_TRUE(client.ok());
  exposure::v1::GetFilterRequest req;
  req.set_user_id("nobody");
  auto resp = (*client)->GetFilter(req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_TRUE(PulledFilter::Create(resp->filter(), resp->version()).ok());
  auto wrong = PulledFilter::Create(resp->filter(), "ffffffffffffffff");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace exposure_filter
