// The wall clock stepping backwards or forwards by days (NTP steps, an
// operator, a VM restored from a snapshot), driven with a ManualClock through
// the handlers and the store: live history survives steps back (sweeps
// included), slices that aged out while the clock was ahead never come back,
// event times too far ahead of the (stepped) clock are rejected naming the
// field, and what measures intervals (uptime, the memory ceiling's
// least-recently-active order) reads the monotonic clock.
// docs/reliability.md, "Time and clocks".
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "exposure_filter/filter_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/config/server_config.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {
namespace {

using ::testing::StartsWith;

constexpr int64_t kDayMs = 86'400'000;
// 4.5 days into a slice of the 5-day grid (slice 3935 starts at
// 1,699,920,000,000): slices end at now + 0.5 d, now - 4.5 d, ...,
// now - 29.5 d, so a 2-day step forward ages the oldest live slice out.
constexpr int64_t kNowMs = 1'699'920'000'000 + 4 * kDayMs + kDayMs / 2;
// In that oldest live slice: inside the window now, outside it after +2 d.
constexpr int64_t kOldEventMs = kNowMs - 29 * kDayMs - 9 * kDayMs / 10;

class ClockJumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto registry = SurfaceRegistry::Create(FilterPolicyOptions{}, {}, 8);
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    store_ = std::make_unique<ShardedFilterStore>(1, &clock_, registry_.get());
    handlers_ = std::make_unique<ExposureFilterHandlers>(
        registry_.get(), store_.get(), RequestLimits{});
  }

  absl::Status Record(const std::string& user, uint64_t item,
                      int64_t event_ms = 0) {
    exposure::v1::RecordExposureRequest req;
    req.set_surface("homefeed");
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    e->add_item_ids(item);
    e->set_event_time_ms(event_ms);
    exposure::v1::RecordExposureResponse resp;
    absl::Status s = handlers_->RecordExposure(req, &resp);
    if (s.ok()) last_expired_ = resp.items_expired();
    return s;
  }
  // Whether FilterRecalled removes `item` for `user`.
  bool Filtered(const std::string& user, uint64_t item) {
    exposure::v1::FilterRecalledRequest req;
    req.set_surface("homefeed");
    req.set_user_id(user);
    req.add_candidate_ids(item);
    exposure::v1::FilterRecalledResponse resp;
    EXPECT_TRUE(handlers_->FilterRecalled(req, &resp).ok());
    return resp.removed_count() == 1;
  }
  exposure::v1::GetUserStatsResponse UserStats(const std::string& user) {
    exposure::v1::GetUserStatsRequest req;
    req.set_surface("homefeed");
    req.set_user_id(user);
    exposure::v1::GetUserStatsResponse resp;
    EXPECT_TRUE(handlers_->GetUserStats(req, &resp).ok());
    return resp;
  }
  void Sweep() { store_->DropExpired(); }

  ManualClock clock_{kNowMs};
  std::unique_ptr<SurfaceRegistry> registry_;
  std::unique_ptr<ShardedFilterStore> store_;
  std::unique_ptr<ExposureFilterHandlers> handlers_;
  uint64_t last_expired_ = 0;
};

class BackwardStepTest : public ClockJumpTest,
                         public ::testing::WithParamInterface<int> {};

TEST_P(BackwardStepTest, KeepsHistoryThroughSweepsAndNewWrites) {
  const int64_t days = GetParam();
  ASSERT_TRUE(Record("u", 1).ok());                        // now
  ASSERT_TRUE(Record("u", 2, kNowMs - 20 * kDayMs).ok());  // late, live
  ASSERT_TRUE(Record("u", 3, kNowMs - 29 * kDayMs).ok());  // near the edge
  const uint32_t slices = UserStats("u").slices();
  clock_.Set(kNowMs - days * kDayMs);
  // Slices now "in the future" stay live for reads and for the sweeper.
  Sweep();
  EXPECT_TRUE(Filtered("u", 1));
  EXPECT_TRUE(Filtered("u", 2));
  EXPECT_TRUE(Filtered("u", 3));
  EXPECT_EQ(UserStats("u").slices(), slices);
  // A write after the step ages the user by the stepped clock: nothing of
  // the history may go.
  ASSERT_TRUE(Record("u", 4).ok());
  EXPECT_EQ(last_expired_, 0u);
  Sweep();
  EXPECT_TRUE(Filtered("u", 1));
  EXPECT_TRUE(Filtered("u", 2));
  EXPECT_TRUE(Filtered("u", 3));
  EXPECT_TRUE(Filtered("u", 4));
  // The clock comes back: everything recorded within the window is there.
  clock_.Set(kNowMs + 3'600'000);
  Sweep();
  EXPECT_TRUE(Filtered("u", 1));
  EXPECT_TRUE(Filtered("u", 2));
  EXPECT_TRUE(Filtered("u", 3));
  // Item 4 was recorded at the stepped-back time: within the window of the
  // corrected clock only if the step was shorter than the retention.
  EXPECT_EQ(Filtered("u", 4), days < 30);
}

INSTANTIATE_TEST_SUITE_P(Days, BackwardStepTest, ::testing::Values(3, 40));

class ForwardStepTest : public ClockJumpTest,
                        public ::testing::WithParamInterface<int> {};

TEST_P(ForwardStepTest, SlicesSweptWhileAheadNeverComeBack) {
  const int64_t days = GetParam();
  const int64_t old_event = kOldEventMs;
  ASSERT_TRUE(Record("u", 1, old_event).ok());
  ASSERT_TRUE(Record("u", 2).ok());
  ASSERT_TRUE(Filtered("u", 1));
  clock_.Set(kNowMs + days * kDayMs);
  Sweep();
  const bool old_slice_live =
      registry_->Find("homefeed")
          ->policy.SliceLive(old_event / (5 * kDayMs), kNowMs + days * kDayMs);
  ASSERT_FALSE(old_slice_live);
  EXPECT_FALSE(Filtered("u", 1));
  EXPECT_EQ(Filtered("u", 2), days < 30);
  clock_.Set(kNowMs + 3'600'000);
  // Back in the present: what aged out stays out...
  EXPECT_FALSE(Filtered("u", 1));
  EXPECT_EQ(Filtered("u", 2), days < 30);
  Sweep();
  EXPECT_FALSE(Filtered("u", 1));
  // ...and writes at the corrected time are accepted and remembered.
  ASSERT_TRUE(Record("u", 5).ok());
  EXPECT_EQ(last_expired_, 0u);
  EXPECT_TRUE(Filtered("u", 5));
  EXPECT_TRUE(UserStats("u").exists());
}

TEST_P(ForwardStepTest, AWriteWhileAheadAgesOnlyThatUsersOldSlices) {
  const int64_t days = GetParam();
  const int64_t old_event = kOldEventMs;
  ASSERT_TRUE(Record("u", 1, old_event).ok());
  ASSERT_TRUE(Record("u", 2).ok());
  clock_.Set(kNowMs + days * kDayMs);
  // The write drops u's aged slices (no sweep needed) and opens one ahead.
  ASSERT_TRUE(Record("u", 3).ok());
  clock_.Set(kNowMs + 3'600'000);
  EXPECT_FALSE(Filtered("u", 1));          // aged out while ahead: gone
  EXPECT_EQ(Filtered("u", 2), days < 30);  // dropped only if it aged too
  // The slice written while ahead is "in the future" now and stays live:
  // a sweep must not delete it.
  Sweep();
  EXPECT_TRUE(Filtered("u", 3));
}

INSTANTIATE_TEST_SUITE_P(Days, ForwardStepTest, ::testing::Values(2, 60));

TEST_F(ClockJumpTest, ABackwardStepNeverExceedsTheLiveSliceBudget) {
  // History in every slice of the window, then the clock steps back 40
  // days and history arrives for the stepped-back window too: without a
  // bound the user would hold 14 live slices (twice the slices the FP
  // budget is split over). Regression test: the extra events go into the
  // nearest newer slice, and nothing is forgotten.
  for (int i = 0; i < 7; ++i) {
    // One item per slice of the window, the last in the oldest live one.
    const int64_t t = i == 6 ? kOldEventMs : kNowMs - i * 5 * kDayMs;
    ASSERT_TRUE(Record("u", 100 + i, t).ok());
  }
  const int policy_live = registry_->Find("homefeed")->policy.max_live_slices();
  ASSERT_EQ(UserStats("u").slices(), static_cast<uint32_t>(policy_live));
  clock_.Set(kNowMs - 40 * kDayMs);
  for (int i = 0; i < 7; ++i) {
    const int64_t ago = i == 6 ? kNowMs - kOldEventMs : i * 5 * kDayMs;
    const int64_t t = clock_.NowMs() - ago;
    ASSERT_TRUE(Record("u", 200 + i, t).ok());
    EXPECT_EQ(last_expired_, 0u);
  }
  const exposure::v1::GetUserStatsResponse st = UserStats("u");
  EXPECT_LE(st.slices(), static_cast<uint32_t>(policy_live));
  for (int i = 0; i < 7; ++i) {
    EXPECT_TRUE(Filtered("u", 100 + i)) << i;
    EXPECT_TRUE(Filtered("u", 200 + i)) << i;
  }
  // The pulled filter stays within the format's limits and claims it all.
  exposure::v1::GetFilterRequest pull;
  pull.set_surface("homefeed");
  pull.set_user_id("u");
  exposure::v1::GetFilterResponse pulled;
  ASSERT_TRUE(handlers_->GetFilter(pull, &pulled).ok());
  absl::StatusOr<FilterView> view = FilterView::Parse(pulled.filter());
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_LE(view->segments().size(), static_cast<size_t>(policy_live) * 8);
  for (int i = 0; i < 7; ++i) {
    EXPECT_TRUE(view->MayContainId(100 + i));
    EXPECT_TRUE(view->MayContainId(200 + i));
  }
  // Back in the present, the history written before the step is intact.
  clock_.Set(kNowMs);
  Sweep();
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(Filtered("u", 100 + i)) << i;
}

TEST_F(ClockJumpTest, ReadsWhileAheadDoNotDropHistory) {
  // Without a sweep or a write, a clock briefly ahead only hides slices
  // from reads; nothing is dropped, so the corrected clock sees them.
  ASSERT_TRUE(Record("u", 1, kOldEventMs).ok());
  clock_.Set(kNowMs + 2 * kDayMs);
  EXPECT_FALSE(Filtered("u", 1));
  clock_.Set(kNowMs);
  EXPECT_TRUE(Filtered("u", 1));
}

TEST_F(ClockJumpTest, EventTimesAheadOfASteppedBackClockAreRejected) {
  ASSERT_TRUE(Record("u", 1).ok());
  clock_.Set(kNowMs - 3 * kDayMs);
  // A producer with the right time is now 3 days "ahead": refused, naming
  // the field, and nothing is applied.
  exposure::v1::RecordExposureRequest req;
  req.set_surface("homefeed");
  exposure::v1::Exposure* ok = req.add_exposures();
  ok->set_user_id("v");
  ok->add_item_ids(9);
  exposure::v1::Exposure* ahead = req.add_exposures();
  ahead->set_user_id("v");
  ahead->add_item_ids(10);
  ahead->set_event_time_ms(kNowMs);
  exposure::v1::RecordExposureResponse resp;
  const absl::Status s = handlers_->RecordExposure(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              StartsWith("exposures[1].event_time_ms: "));
  EXPECT_FALSE(Filtered("v", 9));
  EXPECT_FALSE(UserStats("v").exists());
  // Exactly max_future_skew (5 min) ahead of the stepped clock is accepted
  // (recorded at "now"); one ms more is not.
  const int64_t now = clock_.NowMs();
  EXPECT_TRUE(Record("v", 11, now + 5 * 60'000).ok());
  EXPECT_TRUE(Filtered("v", 11));
  const absl::Status late = Record("v", 12, now + 5 * 60'000 + 1);
  EXPECT_EQ(late.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(late.message()),
              StartsWith("exposures[0].event_time_ms: "));
}

TEST_F(ClockJumpTest, UptimeIsMonotonicAcrossSteps) {
  clock_.Advance(absl::Seconds(90));
  clock_.Set(kNowMs - 40 * kDayMs);
  exposure::v1::GetServerStatsResponse stats;
  ASSERT_TRUE(handlers_->GetServerStats({}, &stats).ok());
  EXPECT_EQ(stats.uptime_ms(), 90'000);
  clock_.Set(kNowMs + 60 * kDayMs);
  ASSERT_TRUE(handlers_->GetServerStats({}, &stats).ok());
  EXPECT_EQ(stats.uptime_ms(), 90'000);
}

TEST_F(ClockJumpTest, MemoryCeilingEvictsByActivityNotByWallClock) {
  // Two big users, a then b, one second apart; the wall clock steps back
  // 3 days; a is read (it is now the most recently active). A new small
  // user pushes the store over the ceiling: b must go, not a, though a's
  // last activity has the smaller wall-clock time.
  auto record_many = [&](const std::string& user) {
    exposure::v1::RecordExposureRequest req;
    req.set_surface("homefeed");
    exposure::v1::Exposure* e = req.add_exposures();
    e->set_user_id(user);
    for (uint64_t i = 0; i < 200; ++i) e->add_item_ids(i);
    exposure::v1::RecordExposureResponse resp;
    ASSERT_TRUE(handlers_->RecordExposure(req, &resp).ok());
  };
  record_many("a");
  clock_.Advance(absl::Seconds(1));
  record_many("b");
  // Grow the table to its size with c now, so that c's insert below does
  // not (the new slack would count against the ceiling too).
  ASSERT_TRUE(Record("d", 1).ok());
  exposure::v1::DeleteUserRequest del;
  del.set_surface("homefeed");
  del.set_user_id("d");
  exposure::v1::DeleteUserResponse deleted;
  ASSERT_TRUE(handlers_->DeleteUser(del, &deleted).ok());
  clock_.Advance(absl::Seconds(1));
  clock_.Set(kNowMs - 3 * kDayMs);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Filtered("a", 7));  // touches a
  store_->SetMemoryLimit(store_->total_bytes() + 1);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Record("c", 1).ok());
  EXPECT_EQ(store_->evictions().users, 1u);
  EXPECT_TRUE(UserStats("a").exists());
  EXPECT_FALSE(UserStats("b").exists());
  EXPECT_TRUE(UserStats("c").exists());
}

}  // namespace
}  // namespace exposure_filter
