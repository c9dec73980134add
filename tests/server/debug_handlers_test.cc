// The debugging RPCs in-process with a manual clock: Explain's verdicts,
// trace entries recorded at the filter's event times and aged out with their
// slice, and the traced-user admin calls.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"
#include "src/store/trace_log.h"

namespace exposure_filter {
namespace {

using exposure::v1::ExplainRequest;
using exposure::v1::ExplainResponse;
using exposure::v1::ItemExplanation;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kDayMs = 24 * 3600 * 1000;
constexpr int64_t kSpanMs = 5 * kDayMs;        // default slice span
constexpr int64_t kRetentionMs = 30 * kDayMs;  // default retention
// A slice boundary plus one day, so "the current slice" began before now.
constexpr int64_t kNowMs = 340'000 * kSpanMs / 1000 * 1000 + kDayMs;

class DebugHandlersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FilterPolicyOptions tiny;
    tiny.fp_rate = 0.5;
    registry_ =
        *SurfaceRegistry::Create(FilterPolicyOptions{}, {{"tiny", tiny}}, 8);
    store_ = std::make_unique<ShardedFilterStore>(4, &clock_, registry_.get());
    trace_ = std::make_unique<TraceLog>(TraceLimits{});
    handlers_ = std::make_unique<ExposureFilterHandlers>(
        registry_.get(), store_.get(), RequestLimits{}, trace_.get());
  }

  void Trace(const std::string& user) {
    exposure::v1::AddTracedUsersRequest req;
    req.add_user_ids(user);
    exposure::v1::AddTracedUsersResponse resp;
    ASSERT_TRUE(handlers_->AddTracedUsers(req, &resp).ok());
  }

  void Record(const std::string& user, const std::vector<uint64_t>& ids,
              int64_t event_ms = 0, const std::string& surface = "") {
    exposure::v1::RecordExposureRequest req;
    req.set_surface(surface);
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->set_event_time_ms(event_ms);
    for (uint64_t id : ids) e->add_item_ids(id);
    exposure::v1::RecordExposureResponse resp;
    ASSERT_TRUE(handlers_->RecordExposure(req, &resp).ok());
  }

  ExplainResponse Explain(const std::string& user,
                          const std::vector<uint64_t>& ids,
                          const std::string& surface = "") {
    ExplainRequest req;
    req.set_surface(surface);
    req.set_user_id(user);
    for (uint64_t id : ids) req.add_item_ids(id);
    ExplainResponse resp;
    const absl::Status s = handlers_->Explain(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  static std::vector<int64_t> Times(const ItemExplanation& item) {
    return {item.recorded_exposures_ms().begin(),
            item.recorded_exposures_ms().end()};
  }

  ManualClock clock_{kNowMs};
  std::unique_ptr<SurfaceRegistry> registry_;
  std::unique_ptr<ShardedFilterStore> store_;
  std::unique_ptr<TraceLog> trace_;
  std::unique_ptr<ExposureFilterHandlers> handlers_;
};

TEST_F(DebugHandlersTest, TraceRecordsTheFilterEventTimes) {
  Trace("u");
  Record("u", {1}, kNowMs - 2 * kDayMs);   // late but live
  Record("u", {2}, kNowMs + 60'000);       // skew: recorded now
  Record("u", {3}, kNowMs - 40 * kDayMs);  // expired: ignored
  const ExplainResponse r = Explain("u", {1, 2, 3});
  EXPECT_THAT(Times(r.items(0)), ElementsAre(kNowMs - 2 * kDayMs));
  EXPECT_THAT(Times(r.items(1)), ElementsAre(kNowMs));
  EXPECT_THAT(Times(r.items(2)), IsEmpty());
  EXPECT_EQ(r.items(2).verdict(), ItemExplanation::KEPT);
  EXPECT_EQ(trace_->List()[0].entries, 2u);
}

TEST_F(DebugHandlersTest, TraceEntriesAgeOutWithTheirSlice) {
  Trace("u");
  Record("u", {1});
  const int64_t slice_start = kNowMs / kSpanMs * kSpanMs;
  const int64_t dies_at = slice_start + kSpanMs + kRetentionMs;
  clock_.Set(dies_at - 1);
  ExplainResponse r = Explain("u", {1});
  EXPECT_EQ(r.items(0).verdict(), ItemExplanation::FILTERED_RECORDED);
  ASSERT_EQ(r.items(0).claimed_by_size(), 1);
  EXPECT_EQ(r.items(0).claimed_by(0).start_ms(), slice_start);
  EXPECT_EQ(r.items(0).claimed_by(0).end_ms(), slice_start + kSpanMs);
  EXPECT_EQ(trace_->DropExpired(clock_.NowMs()), 0u);

  clock_.Set(dies_at);
  r = Explain("u", {1});
  EXPECT_FALSE(r.user_exists());
  EXPECT_EQ(r.items(0).verdict(), ItemExplanation::KEPT);
  EXPECT_THAT(Times(r.items(0)), IsEmpty());
  EXPECT_EQ(trace_->DropExpired(clock_.NowMs()), 1u);
}

TEST_F(DebugHandlersTest, FalsePositiveIsProvenOnlyWhenTracingCoversTheSlice) {
  // "early" is traced before the next slice starts; "late" only after.
  Trace("early");
  const int64_t next_slice = (kNowMs / kSpanMs + 1) * kSpanMs;
  clock_.Set(next_slice + 1000);
  Trace("late");
  std::vector<uint64_t> recorded, fresh;
  for (uint64_t i = 1; i <= 80; ++i) recorded.push_back(i);
  for (uint64_t i = 1000; i < 3000; ++i) fresh.push_back(i);
  int proven = 0, unverified = 0;
  for (const std::string user : {"early", "late"}) {
    Record(user, recorded, 0, "tiny");
    const ExplainResponse r = Explain(user, fresh, "tiny");
    EXPECT_GT(r.estimated_fp_rate(), 0.001);
    for (const ItemExplanation& item : r.items()) {
      if (!item.filtered()) continue;
      EXPECT_THAT(Times(item), IsEmpty());
      if (user == "early") {
        EXPECT_EQ(item.verdict(), ItemExplanation::FILTERED_FALSE_POSITIVE);
        ++proven;
      } else {
        EXPECT_EQ(item.verdict(), ItemExplanation::FILTERED_UNVERIFIED);
        ++unverified;
      }
    }
  }
  EXPECT_GT(proven, 0);
  EXPECT_GT(unverified, 0);
}

TEST_F(DebugHandlersTest, UntracedUsersAreRecordedNowhere) {
  Record("nobody", {1});
  EXPECT_TRUE(trace_->List().empty());
  const ExplainResponse r = Explain("nobody", {1});
  EXPECT_FALSE(r.traced());
  EXPECT_EQ(r.items(0).verdict(), ItemExplanation::FILTERED_UNVERIFIED);
}

TEST_F(DebugHandlersTest, ListTracedUsersReportsLimits) {
  Trace("b");
  Trace("a");
  exposure::v1::ListTracedUsersResponse resp;
  ASSERT_TRUE(handlers_->ListTracedUsers({}, &resp).ok());
  ASSERT_EQ(resp.users_size(), 2);
  EXPECT_EQ(resp.users(0).user_id(), "a");
  EXPECT_EQ(resp.users(0).traced_since_ms(), kNowMs);
  EXPECT_EQ(resp.max_users(), 1000u);
  EXPECT_EQ(resp.max_entries_per_user(), 10000u);
}

}  // namespace
}  // namespace exposure_filter
