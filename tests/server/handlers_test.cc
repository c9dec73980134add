// ExposureFilterHandlers driven in-process: every RPC's behaviour, every
// validation error (code and field path), the request limits at and just past
// their values, and the wire layout of FilterRecalled's results.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "exposure_filter/filter_view.h"
#include "exposure_filter/item_hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/filter/bloom_slices.h"
#include "src/filter/filter_parts.h"
#include "src/filter/user_filter.h"
#include "src/server/config/server_config.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/store/clock.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {
namespace {

using exposure::v1::DeleteUserRequest;
using exposure::v1::DeleteUserResponse;
using exposure::v1::Exposure;
using exposure::v1::FilterRecalledRequest;
using exposure::v1::FilterRecalledResponse;
using exposure::v1::GetFilterRequest;
using exposure::v1::GetFilterResponse;
using exposure::v1::GetServerStatsRequest;
using exposure::v1::GetServerStatsResponse;
using exposure::v1::GetUserStatsRequest;
using exposure::v1::GetUserStatsResponse;
using exposure::v1::RecordExposureRequest;
using exposure::v1::RecordExposureResponse;
using exposure::v1::ResultMode;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr int64_t kNowMs = 1'700'000'000'000;  // Nov 2023
constexpr int kShards = 4;

// Small limits so "at the limit" and "one past it" are cheap to build.
RequestLimits TestLimits() {
  RequestLimits l;
  l.max_id_bytes = 8;
  l.max_items_per_request = 6;
  l.max_exposures_per_request = 3;
  l.max_candidates_per_request = 5;
  l.max_future_skew = absl::Minutes(5);
  return l;
}

MATCHER_P2(StatusIs, code, message_matcher, "") {
  if (arg.code() != code) {
    *result_listener << "code " << absl::StatusCodeToString(arg.code())
                     << ", message \"" << arg.message() << "\"";
    return false;
  }
  return ::testing::ExplainMatchResult(
      message_matcher, std::string(arg.message()), result_listener);
}

auto IsOk() { return StatusIs(absl::StatusCode::kOk, ::testing::_); }
auto InvalidAt(const std::string& field) {
  return StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(field + ": "));
}

Exposure MakeExposure(const std::string& user, std::vector<uint64_t> ids,
                      std::vector<std::string> keys = {},
                      int64_t event_ms = 0) {
  Exposure e;
  e.set_user_id(user);
  for (uint64_t id : ids) e.add_item_ids(id);
  for (std::string& key : keys) e.add_item_keys(std::move(key));
  e.set_event_time_ms(event_ms);
  return e;
}

FilterRecalledRequest MakeFilterRequest(
    const std::string& user, std::vector<uint64_t> ids,
    std::vector<std::string> keys = {},
    ResultMode mode = exposure::v1::KEPT_IDS,
    const std::string& surface = "homefeed") {
  FilterRecalledRequest req;
  req.set_surface(surface);
  req.set_user_id(user);
  for (uint64_t id : ids) req.add_candidate_ids(id);
  for (std::string& key : keys) req.add_candidate_keys(std::move(key));
  req.set_mode(mode);
  return req;
}

class ExposureFilterHandlersTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(TestLimits(), /*max_surfaces=*/8); }

  void Build(const RequestLimits& limits, size_t max_surfaces,
             const std::vector<std::pair<std::string, FilterPolicyOptions>>&
                 overrides = {}) {
    handlers_.reset();
    store_.reset();
    absl::StatusOr<std::unique_ptr<SurfaceRegistry>> registry =
        SurfaceRegistry::Create(FilterPolicyOptions{}, overrides, max_surfaces);
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    store_ =
        std::make_unique<ShardedFilterStore>(kShards, &clock_, registry_.get());
    handlers_ = std::make_unique<ExposureFilterHandlers>(registry_.get(),
                                                         store_.get(), limits);
  }

  absl::Status Record(std::vector<Exposure> exposures,
                      const std::string& surface = "homefeed",
                      RecordExposureResponse* resp_out = nullptr) {
    RecordExposureRequest req;
    req.set_surface(surface);
    for (Exposure& e : exposures) *req.add_exposures() = std::move(e);
    RecordExposureResponse resp;
    absl::Status s = handlers_->RecordExposure(req, &resp);
    if (resp_out != nullptr) *resp_out = resp;
    return s;
  }

  FilterRecalledResponse Filter(const FilterRecalledRequest& req) {
    FilterRecalledResponse resp;
    const absl::Status s = handlers_->FilterRecalled(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  absl::Status FilterStatus(const FilterRecalledRequest& req) {
    FilterRecalledResponse resp;
    return handlers_->FilterRecalled(req, &resp);
  }

  GetServerStatsResponse ServerStats() {
    GetServerStatsResponse resp;
    EXPECT_TRUE(handlers_->GetServerStats({}, &resp).ok());
    return resp;
  }

  ManualClock clock_{kNowMs};
  std::unique_ptr<SurfaceRegistry> registry_;
  std::unique_ptr<ShardedFilterStore> store_;
  std::unique_ptr<ExposureFilterHandlers> handlers_;
};

// --- RecordExposure ---------------------------------------------------------

TEST_F(ExposureFilterHandlersTest, RecordExposureCountsRecordedAndExpired) {
  const int64_t too_old =
      kNowMs - absl::ToInt64Milliseconds(FilterPolicyOptions{}.retention) - 1;
  RecordExposureResponse resp;
  ASSERT_THAT(Record({MakeExposure("alice", {1, 2}, {"k"}),
                      MakeExposure("bob", {3, 4}, {}, too_old)},
                     "homefeed", &resp),
              IsOk());
  EXPECT_EQ(resp.items_recorded(), 3u);
  EXPECT_EQ(resp.items_expired(), 2u);

  const FilterRecalledResponse alice =
      Filter(MakeFilterRequest("alice", {1, 2, 3}, {"k", "j"}));
  EXPECT_THAT(alice.kept_ids(), ElementsAre(3));
  EXPECT_THAT(alice.kept_keys(), ElementsAre("j"));
  // bob's only exposure was too old: he was never created.
  EXPECT_THAT(Filter(MakeFilterRequest("bob", {3, 4})).kept_ids(),
              ElementsAre(3, 4));
  EXPECT_EQ(ServerStats().users(), 1u);
}

TEST_F(ExposureFilterHandlersTest, RecordExposureRejectsABadSurface) {
  EXPECT_THAT(Record({MakeExposure("alice", {1})}, "Home Feed"),
              InvalidAt("surface"));
  EXPECT_THAT(Record({MakeExposure("alice", {1})}, std::string(65, 'a')),
              InvalidAt("surface"));
}

TEST_F(ExposureFilterHandlersTest, RejectedRecordExposureAppliesNothing) {
  // The first exposure is valid, the second is not: all or nothing.
  EXPECT_THAT(Record({MakeExposure("alice", {1, 2}), MakeExposure("", {3})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("exposures[1].user_id: empty")));
  EXPECT_THAT(Filter(MakeFilterRequest("alice", {1, 2})).kept_ids(),
              ElementsAre(1, 2));
  const GetServerStatsResponse stats = ServerStats();
  EXPECT_EQ(stats.users(), 0u);
  EXPECT_EQ(stats.bytes(), 0u);
  EXPECT_EQ(stats.items_recorded(), 0u);
  // Not even the surface was created.
  EXPECT_THAT(stats.surface_stats(), IsEmpty());
}

TEST_F(ExposureFilterHandlersTest, UserIdLengthLimit) {
  EXPECT_THAT(Record({MakeExposure(std::string(8, 'u'), {1})}), IsOk());
  EXPECT_THAT(
      Record({MakeExposure("ok", {1}), MakeExposure(std::string(9, 'u'), {1})}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(StartsWith("exposures[1].user_id: "),
                     HasSubstr("--max_id_bytes"))));
  EXPECT_THAT(Record({MakeExposure("", {1})}),
              InvalidAt("exposures[0].user_id"));
}

TEST_F(ExposureFilterHandlersTest, ItemKeysMustBeNonEmptyAndShort) {
  EXPECT_THAT(Record({MakeExposure("alice", {}, {"a", std::string(8, 'k')})}),
              IsOk());
  EXPECT_THAT(Record({MakeExposure("alice", {}, {"a", ""})}),
              InvalidAt("exposures[0].item_keys[1]"));
  EXPECT_THAT(Record({MakeExposure("a", {1}),
                      MakeExposure("b", {}, {std::string(9, 'k')})}),
              InvalidAt("exposures[1].item_keys[0]"));
}

TEST_F(ExposureFilterHandlersTest, EventTimeMustBeNonNegativeAndNotFarAhead) {
  EXPECT_THAT(Record({MakeExposure("alice", {1}, {}, -1)}),
              InvalidAt("exposures[0].event_time_ms"));
  const int64_t skew_ms = absl::ToInt64Milliseconds(absl::Minutes(5));
  // Exactly at the allowed skew: recorded (at "now").
  RecordExposureResponse resp;
  EXPECT_THAT(Record({MakeExposure("alice", {1}, {}, kNowMs + skew_ms)},
                     "homefeed", &resp),
              IsOk());
  EXPECT_EQ(resp.items_recorded(), 1u);
  EXPECT_THAT(Record({MakeExposure("alice", {2}),
                      MakeExposure("bob", {1}, {}, kNowMs + skew_ms + 1)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(StartsWith("exposures[1].event_time_ms: "),
                             HasSubstr("--max_future_skew"))));
}

TEST_F(ExposureFilterHandlersTest, ExposuresPerRequestLimit) {
  EXPECT_THAT(Record({MakeExposure("a", {1}), MakeExposure("b", {1}),
                      MakeExposure("c", {1})}),
              IsOk());
  EXPECT_THAT(Record({MakeExposure("a", {1}), MakeExposure("b", {1}),
                      MakeExposure("c", {1}), MakeExposure("d", {1})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(StartsWith("exposures: "),
                             HasSubstr("--max_exposures_per_request"))));
}

TEST_F(ExposureFilterHandlersTest, ItemsPerRequestLimitCountsIdsAndKeys) {
  // 6 items over two users: at the limit.
  EXPECT_THAT(Record({MakeExposure("a", {1, 2, 3}, {"x"}),
                      MakeExposure("b", {4}, {"y"})}),
              IsOk());
  EXPECT_THAT(Record({MakeExposure("a", {1, 2, 3}, {"x"}),
                      MakeExposure("b", {4}, {"y", "z"})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(StartsWith("exposures: "),
                             HasSubstr("--max_items_per_request"))));
}

TEST_F(ExposureFilterHandlersTest, NewSurfacesStopAtMaxSurfaces) {
  Build(TestLimits(), /*max_surfaces=*/2);
  EXPECT_THAT(Record({MakeExposure("a", {1})}, "one"), IsOk());
  EXPECT_THAT(Record({MakeExposure("a", {1})}, "two"), IsOk());
  EXPECT_THAT(
      Record({MakeExposure("a", {1})}, "three"),
      StatusIs(absl::StatusCode::kResourceExhausted, StartsWith("surface: ")));
  // Existing surfaces still take writes; reads of a new one create nothing.
  EXPECT_THAT(Record({MakeExposure("b", {1})}, "one"), IsOk());
  EXPECT_THAT(
      Filter(MakeFilterRequest("a", {1}, {}, exposure::v1::KEPT_IDS, "three"))
          .kept_ids(),
      ElementsAre(1));
  EXPECT_EQ(ServerStats().surface_stats_size(), 2);
}

TEST_F(ExposureFilterHandlersTest, IdsAndKeysAreDistinctItems) {
  ASSERT_THAT(Record({MakeExposure("alice", {7}, {"8"})}), IsOk());
  const FilterRecalledResponse resp =
      Filter(MakeFilterRequest("alice", {7, 8}, {"7", "8"}));
  EXPECT_THAT(resp.kept_ids(), ElementsAre(8));
  EXPECT_THAT(resp.kept_keys(), ElementsAre("7"));
  EXPECT_EQ(resp.removed_count(), 2u);
}

// --- FilterRecalled ---------------------------------------------------------

TEST_F(ExposureFilterHandlersTest, KeptIdsPreservesRequestOrder) {
  ASSERT_THAT(Record({MakeExposure("alice", {1, 3}, {"k1"})}), IsOk());
  const FilterRecalledResponse resp =
      Filter(MakeFilterRequest("alice", {9, 1, 8}, {"z", "k1"}));
  EXPECT_THAT(resp.kept_ids(), ElementsAre(9, 8));
  EXPECT_THAT(resp.kept_keys(), ElementsAre("z"));
  EXPECT_EQ(resp.removed_count(), 2u);
  EXPECT_TRUE(resp.keep_mask().empty());
}

TEST_F(ExposureFilterHandlersTest, KeepMaskIsLsbFirstIdsThenKeys) {
  Build(RequestLimits{}, 8);  // room for 11 candidates
  ASSERT_THAT(Record({MakeExposure("alice", {1, 3}, {"k1"})}), IsOk());
  // Candidates 0..10: ids 0..8 then keys "k0", "k1". Removed: id 1 (bit 1),
  // id 3 (bit 3), key "k1" (bit 10).
  const FilterRecalledResponse resp =
      Filter(MakeFilterRequest("alice", {0, 1, 2, 3, 4, 5, 6, 7, 8},
                               {"k0", "k1"}, exposure::v1::KEEP_MASK));
  EXPECT_EQ(resp.keep_mask(), std::string("\xf5\x03", 2));
  EXPECT_EQ(resp.removed_count(), 3u);
  EXPECT_THAT(resp.kept_ids(), IsEmpty());
  EXPECT_THAT(resp.kept_keys(), IsEmpty());
}

TEST_F(ExposureFilterHandlersTest, KeepMaskLengthIsCeilNOver8WithZeroPadding) {
  Build(RequestLimits{}, 8);
  struct Case {
    int ids, keys;
    std::string mask;
  };
  for (const Case& c : {Case{0, 0, ""}, Case{1, 0, "\x01"}, Case{0, 3, "\x07"},
                        Case{5, 3, "\xff"}, Case{8, 1, std::string("\xff\x01")},
                        Case{9, 7, "\xff\xff"}}) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < c.ids; ++i) ids.push_back(100 + i);
    std::vector<std::string> keys;
    for (int i = 0; i < c.keys; ++i) keys.push_back(absl::StrCat("key", i));
    const FilterRecalledResponse resp =
        Filter(MakeFilterRequest("nobody", ids, keys, exposure::v1::KEEP_MASK));
    EXPECT_EQ(resp.keep_mask(), c.mask)
        << c.ids << " ids, " << c.keys << " keys";
    EXPECT_EQ(resp.removed_count(), 0u);
  }
}

TEST_F(ExposureFilterHandlersTest,
       KeepMaskAgreesWithKeptIdsForEveryBytePattern) {
  Build(RequestLimits{}, 8);
  // Candidate c is recorded iff bit c % 8 of c / 8 is set: the 256 bytes of
  // the mask run through every pattern of removed bits (the mask is packed 8
  // flags at a time), plus a ragged tail of 5.
  std::vector<uint64_t> candidates, recorded;
  for (uint64_t c = 0; c < 256 * 8 + 5; ++c) {
    candidates.push_back(c);
    if (((c / 8) >> (c % 8)) & 1) recorded.push_back(c);
  }
  ASSERT_THAT(Record({MakeExposure("alice", recorded)}), IsOk());
  const FilterRecalledResponse mask = Filter(
      MakeFilterRequest("alice", candidates, {}, exposure::v1::KEEP_MASK));
  const FilterRecalledResponse ids = Filter(
      MakeFilterRequest("alice", candidates, {}, exposure::v1::KEPT_IDS));
  ASSERT_EQ(mask.keep_mask().size(), (candidates.size() + 7) / 8);
  std::vector<uint64_t> kept_by_mask;
  for (uint64_t c : candidates) {
    if ((static_cast<uint8_t>(mask.keep_mask()[c / 8]) >> (c % 8)) & 1) {
      kept_by_mask.push_back(c);
    }
  }
  EXPECT_THAT(kept_by_mask,
              ElementsAreArray(ids.kept_ids().begin(), ids.kept_ids().end()));
  EXPECT_EQ(mask.removed_count(), candidates.size() - kept_by_mask.size());
  EXPECT_EQ(mask.removed_count(), ids.removed_count());
  // No false negatives; false positives only at the filter's small rate.
  for (uint64_t c : recorded) {
    EXPECT_FALSE(
        std::binary_search(kept_by_mask.begin(), kept_by_mask.end(), c))
        << c;
  }
  EXPECT_GT(kept_by_mask.size(),
            (candidates.size() - recorded.size()) * 9 / 10);
  // Padding bits past the last candidate are zero.
  EXPECT_EQ(static_cast<uint8_t>(mask.keep_mask().back()) >> 5, 0);
}

TEST_F(ExposureFilterHandlersTest, UnknownUserAndSurfaceKeepEverything) {
  ASSERT_THAT(Record({MakeExposure("alice", {1, 2})}), IsOk());
  EXPECT_THAT(Filter(MakeFilterRequest("bob", {1, 2})).kept_ids(),
              ElementsAre(1, 2));
  const FilterRecalledResponse other = Filter(
      MakeFilterRequest("alice", {1, 2}, {}, exposure::v1::KEPT_IDS, "video"));
  EXPECT_THAT(other.kept_ids(), ElementsAre(1, 2));
  EXPECT_EQ(other.removed_count(), 0u);
  EXPECT_EQ(ServerStats().surface_stats_size(), 1);
}

TEST_F(ExposureFilterHandlersTest, FilterRecalledValidation) {
  EXPECT_THAT(FilterStatus(MakeFilterRequest("alice", {1}, {},
                                             exposure::v1::KEPT_IDS, "BAD")),
              InvalidAt("surface"));
  EXPECT_THAT(FilterStatus(MakeFilterRequest("", {1})), InvalidAt("user_id"));
  EXPECT_THAT(FilterStatus(MakeFilterRequest(std::string(9, 'u'), {1})),
              InvalidAt("user_id"));
  EXPECT_THAT(FilterStatus(MakeFilterRequest(std::string(8, 'u'), {1})),
              IsOk());
  EXPECT_THAT(FilterStatus(MakeFilterRequest("alice", {1}, {},
                                             static_cast<ResultMode>(7))),
              InvalidAt("mode"));
  EXPECT_THAT(FilterStatus(MakeFilterRequest("alice", {}, {"a", "b", ""})),
              InvalidAt("candidate_keys[2]"));
  EXPECT_THAT(
      FilterStatus(MakeFilterRequest("alice", {}, {std::string(9, 'k')})),
      InvalidAt("candidate_keys[0]"));
  EXPECT_THAT(
      FilterStatus(MakeFilterRequest("alice", {}, {std::string(8, 'k')})),
      IsOk());
}

TEST_F(ExposureFilterHandlersTest, CandidatesPerRequestLimitCountsIdsAndKeys) {
  EXPECT_THAT(FilterStatus(MakeFilterRequest("alice", {1, 2, 3}, {"a", "b"})),
              IsOk());
  EXPECT_THAT(
      FilterStatus(MakeFilterRequest("alice", {1, 2, 3}, {"a", "b", "c"})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(StartsWith("candidate_ids: "),
                     HasSubstr("--max_candidates_per_request"))));
}

// --- GetFilter --------------------------------------------------------------

TEST_F(ExposureFilterHandlersTest, GetFilterReturnsAPortableFilterAndVersion) {
  ASSERT_THAT(Record({MakeExposure("alice", {1, 2, 3})}), IsOk());
  GetFilterRequest req;
  req.set_surface("homefeed");
  req.set_user_id("alice");
  GetFilterResponse resp;
  ASSERT_THAT(handlers_->GetFilter(req, &resp), IsOk());
  EXPECT_FALSE(resp.not_modified());
  EXPECT_EQ(resp.version().size(), 16u);
  absl::StatusOr<FilterView> view = FilterView::Parse(resp.filter());
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(view->MayContainId(1));
  EXPECT_TRUE(view->MayContainId(3));
  EXPECT_EQ(view->fp_rate_target(), 0.01);

  // Same version: not_modified and no bytes.
  req.set_if_version(resp.version());
  GetFilterResponse again;
  ASSERT_THAT(handlers_->GetFilter(req, &again), IsOk());
  EXPECT_TRUE(again.not_modified());
  EXPECT_EQ(again.version(), resp.version());
  EXPECT_TRUE(again.filter().empty());

  // A new exposure changes the version; the old one is stale.
  ASSERT_THAT(Record({MakeExposure("alice", {4})}), IsOk());
  GetFilterResponse changed;
  ASSERT_THAT(handlers_->GetFilter(req, &changed), IsOk());
  EXPECT_FALSE(changed.not_modified());
  EXPECT_NE(changed.version(), resp.version());
  EXPECT_TRUE(FilterView::Parse(changed.filter())->MayContainId(4));
}

// The version is a pure function of the filter: reads, re-recording a present
// item and sweeping a slice that no longer counts leave it alone; a new item,
// a delete and a slice ageing out (with no write at all) change it.
TEST_F(ExposureFilterHandlersTest,
       GetFilterVersionChangesExactlyWithTheFilter) {
  const int64_t day = absl::ToInt64Milliseconds(absl::Hours(24));
  auto pull = [&](const std::string& if_version) {
    GetFilterRequest req;
    req.set_surface("homefeed");
    req.set_user_id("alice");
    req.set_if_version(if_version);
    GetFilterResponse resp;
    EXPECT_THAT(handlers_->GetFilter(req, &resp), IsOk());
    // not_modified answers never carry bytes; fresh ones always do.
    EXPECT_EQ(resp.filter().empty(), resp.not_modified());
    return resp;
  };
  const std::string empty = pull("").version();
  ASSERT_THAT(Record({MakeExposure("alice", {1, 2}, {}, kNowMs - 20 * day)}),
              IsOk());
  const std::string v1 = pull("").version();
  EXPECT_NE(v1, empty);
  EXPECT_TRUE(pull(v1).not_modified());

  Filter(MakeFilterRequest("alice", {1, 2, 3}));
  ASSERT_THAT(Record({MakeExposure("alice", {1}, {}, kNowMs - 20 * day)}),
              IsOk());
  EXPECT_TRUE(pull(v1).not_modified()) << "reads and duplicates are no-ops";

  ASSERT_THAT(Record({MakeExposure("alice", {7})}), IsOk());
  const GetFilterResponse after_record = pull(v1);
  EXPECT_FALSE(after_record.not_modified());
  const std::string v2 = after_record.version();
  EXPECT_NE(v2, v1);

  // The 20-day-old slice ages out between two pulls: no write, new version,
  // and the filter no longer claims its items.
  clock_.Advance(absl::Hours(24 * 16));
  const GetFilterResponse after_expiry = pull(v2);
  EXPECT_FALSE(after_expiry.not_modified());
  EXPECT_NE(after_expiry.version(), v2);
  absl::StatusOr<FilterView> view = FilterView::Parse(after_expiry.filter());
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_FALSE(view->MayContainId(1) && view->MayContainId(2));
  EXPECT_TRUE(view->MayContainId(7));
  // The sweeper freeing that slice changes nothing a client can see.
  store_->DropExpired();
  EXPECT_TRUE(pull(after_expiry.version()).not_modified());

  DeleteUserRequest del;
  del.set_surface("homefeed");
  del.set_user_id("alice");
  DeleteUserResponse del_resp;
  ASSERT_THAT(handlers_->DeleteUser(del, &del_resp), IsOk());
  const GetFilterResponse after_delete = pull(after_expiry.version());
  EXPECT_FALSE(after_delete.not_modified());
  EXPECT_EQ(after_delete.version(), empty);
}

TEST_F(ExposureFilterHandlersTest,
       GetFilterOfANeverWrittenSurfaceUsesItsPolicy) {
  FilterPolicyOptions video;
  video.fp_rate = 0.001;
  Build(TestLimits(), 8, {{"video", video}});
  GetFilterRequest req;
  req.set_surface("video");
  req.set_user_id("alice");
  GetFilterResponse resp;
  ASSERT_THAT(handlers_->GetFilter(req, &resp), IsOk());
  absl::StatusOr<FilterView> view = FilterView::Parse(resp.filter());
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(view->slices().empty());
  EXPECT_EQ(view->fp_rate_target(), 0.001);  // the surface's, even empty
  // Reading did not create the surface.
  EXPECT_THAT(ServerStats().surface_stats(), IsEmpty());
}

// accepted_formats: empty = an older client, it gets format 2 and
// its decoder names the version; a list with 2 gets it; a list without 2 is
// refused naming both versions, with no bytes.
TEST_F(ExposureFilterHandlersTest, GetFilterHonoursAcceptedFormats) {
  ASSERT_THAT(Record({MakeExposure("alice", {1, 2, 3})}), IsOk());
  GetFilterRequest req;
  req.set_surface("homefeed");
  req.set_user_id("alice");
  GetFilterResponse resp;
  ASSERT_THAT(handlers_->GetFilter(req, &resp), IsOk());
  ASSERT_GE(resp.filter().size(), 6u);
  EXPECT_EQ(resp.filter()[4], 2);  // format version, little-endian u16
  EXPECT_EQ(FilterView::Parse(resp.filter())->format_version(), 2);

  req.add_accepted_formats(1);
  req.add_accepted_formats(2);
  GetFilterResponse both;
  ASSERT_THAT(handlers_->GetFilter(req, &both), IsOk());
  EXPECT_EQ(both.filter(), resp.filter());

  req.clear_accepted_formats();
  req.add_accepted_formats(1);
  GetFilterResponse old;
  const absl::Status refused = handlers_->GetFilter(req, &old);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("accepted_formats: this server encodes filter "
                        "format 2; the request accepts only 1"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("FilterRecalled"));
  EXPECT_TRUE(old.filter().empty());

  req.clear_accepted_formats();
  for (int i = 0; i < 17; ++i) req.add_accepted_formats(2);
  EXPECT_THAT(handlers_->GetFilter(req, &old), InvalidAt("accepted_formats"));
}

TEST_F(ExposureFilterHandlersTest, GetFilterValidation) {
  GetFilterRequest req;
  GetFilterResponse resp;
  req.set_surface("homefeed");
  EXPECT_THAT(handlers_->GetFilter(req, &resp), InvalidAt("user_id"));
  req.set_user_id(std::string(9, 'u'));
  EXPECT_THAT(handlers_->GetFilter(req, &resp), InvalidAt("user_id"));
  req.set_user_id("alice");
  req.set_surface("Home");
  EXPECT_THAT(handlers_->GetFilter(req, &resp), InvalidAt("surface"));
  req.set_surface("homefeed");
  req.set_if_version(std::string(65, 'f'));
  EXPECT_THAT(handlers_->GetFilter(req, &resp), InvalidAt("if_version"));
  req.set_if_version(std::string(64, 'f'));
  EXPECT_THAT(handlers_->GetFilter(req, &resp), IsOk());
  EXPECT_FALSE(resp.not_modified());
}

// --- GetUserStats -----------------------------------------------------------

TEST_F(ExposureFilterHandlersTest, GetUserStatsOfUnknownUserDoesNotExist) {
  GetUserStatsRequest req;
  req.set_surface("homefeed");
  req.set_user_id("alice");
  GetUserStatsResponse resp;
  ASSERT_THAT(handlers_->GetUserStats(req, &resp), IsOk());  // no surface
  EXPECT_FALSE(resp.exists());
  ASSERT_THAT(Record({MakeExposure("bob", {1})}), IsOk());
  ASSERT_THAT(handlers_->GetUserStats(req, &resp), IsOk());  // no user
  EXPECT_FALSE(resp.exists());
  EXPECT_EQ(resp.items(), 0u);
  EXPECT_EQ(resp.bytes(), 0u);
  EXPECT_THAT(resp.slice_stats(), IsEmpty());
}

TEST_F(ExposureFilterHandlersTest, GetUserStatsDescribesAKnownUser) {
  const int64_t event = kNowMs - 60'000;
  ASSERT_THAT(Record({MakeExposure("alice", {1, 2, 3}, {"a", "b"}, event)}),
              IsOk());
  GetUserStatsRequest req;
  req.set_surface("homefeed");
  req.set_user_id("alice");
  GetUserStatsResponse resp;
  ASSERT_THAT(handlers_->GetUserStats(req, &resp), IsOk());
  EXPECT_TRUE(resp.exists());
  EXPECT_EQ(resp.items(), 5u);
  EXPECT_GT(resp.bytes(), 0u);
  EXPECT_EQ(resp.slices(), 1u);
  EXPECT_GE(resp.segments(), 1u);
  EXPECT_GT(resp.estimated_fp_rate(), 0.0);
  EXPECT_LT(resp.estimated_fp_rate(), 0.01);
  EXPECT_EQ(resp.oldest_exposure_ms(), event);
  EXPECT_EQ(resp.newest_exposure_ms(), event);
  ASSERT_EQ(resp.slice_stats_size(), 1);
  const exposure::v1::SliceStats& slice = resp.slice_stats(0);
  EXPECT_LE(slice.start_ms(), event);
  EXPECT_GT(slice.end_ms(), event);
  EXPECT_EQ(slice.items(), 5u);
  EXPECT_GE(slice.capacity(), 5u);
  EXPECT_EQ(resp.expires_at_ms(),
            slice.end_ms() +
                absl::ToInt64Milliseconds(FilterPolicyOptions{}.retention));
  // The user's bytes are what the server accounts for it.
  EXPECT_EQ(resp.bytes(), ServerStats().bytes());
}

// `runs` and `bloom_segments` count each kind as GetFilter encodes it (its
// slices' R and G); `segments` adds them up (these users hold no run tail,
// which it would count apart).
TEST_F(ExposureFilterHandlersTest, GetUserStatsCountsRunsAndBloomSegments) {
  constexpr int64_t kDayMs = 24 * 3600 * 1000LL;
  // A user of runs only, in three slices (5-day spans: today, 6 and 11
  // days ago).
  ASSERT_THAT(Record({MakeExposure("runs", {1, 2}, {}, kNowMs - 60'000),
                      MakeExposure("runs", {3}, {}, kNowMs - 6 * kDayMs),
                      MakeExposure("runs", {4}, {}, kNowMs - 11 * kDayMs)}),
              IsOk());
  // A user loaded with two slices of legacy Bloom segments (20 and 10 days
  // ago), then written to today: a run slice beside them.
  const absl::StatusOr<const Surface*> surface =
      registry_->GetOrCreate("homefeed");
  ASSERT_TRUE(surface.ok()) << surface.status();
  const FilterPolicy& policy = (*surface)->policy;
  BloomSlices legacy;
  const uint64_t old_items[] = {HashItemId(11), HashItemId(12)};
  legacy.Record(policy, {&old_items[0], 1}, kNowMs - 20 * kDayMs);
  legacy.Record(policy, {&old_items[1], 1}, kNowMs - 10 * kDayMs);
  absl::StatusOr<UserFilter> upgraded =
      UserFilter::FromParts(policy, legacy.ToParts(), "");
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  store_->LoadUser(**surface, "upgraded", *std::move(upgraded));
  ASSERT_THAT(Record({MakeExposure("upgraded", {7, 8}, {}, kNowMs - 60'000)}),
              IsOk());

  const struct {
    const char* user;
    uint32_t runs;
    uint32_t bloom_segments;
  } users[] = {{"runs", 3, 0}, {"upgraded", 1, 2}};
  for (const auto& u : users) {
    GetUserStatsRequest req;
    req.set_surface("homefeed");
    req.set_user_id(u.user);
    GetUserStatsResponse stats;
    ASSERT_THAT(handlers_->GetUserStats(req, &stats), IsOk());
    EXPECT_EQ(stats.runs(), u.runs) << u.user;
    EXPECT_EQ(stats.bloom_segments(), u.bloom_segments) << u.user;
    EXPECT_EQ(stats.segments(), u.runs + u.bloom_segments) << u.user;
    GetFilterRequest pull;
    pull.set_surface("homefeed");
    pull.set_user_id(u.user);
    GetFilterResponse pulled;
    ASSERT_THAT(handlers_->GetFilter(pull, &pulled), IsOk());
    absl::StatusOr<FilterView> view = FilterView::Parse(pulled.filter());
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(stats.runs(), view->runs().size()) << u.user;
    EXPECT_EQ(stats.bloom_segments(), view->segments().size()) << u.user;
    ASSERT_EQ(static_cast<size_t>(stats.slice_stats_size()),
              view->slices().size())
        << u.user;
    for (int i = 0; i < stats.slice_stats_size(); ++i) {
      const exposure::v1::SliceStats& s = stats.slice_stats(i);
      const FilterView::Slice& encoded = view->slices()[i];
      EXPECT_EQ(s.start_ms(), encoded.start_ms) << u.user << " slice " << i;
      EXPECT_EQ(s.runs(), static_cast<uint32_t>(encoded.num_runs))
          << u.user << " slice " << i;
      EXPECT_EQ(s.bloom_segments(), static_cast<uint32_t>(encoded.num_segments))
          << u.user << " slice " << i;
      EXPECT_EQ(s.segments(), s.runs() + s.bloom_segments())
          << u.user << " slice " << i;
    }
  }
}

TEST_F(ExposureFilterHandlersTest, GetUserStatsValidation) {
  GetUserStatsRequest req;
  GetUserStatsResponse resp;
  req.set_surface("homefeed");
  EXPECT_THAT(handlers_->GetUserStats(req, &resp), InvalidAt("user_id"));
  req.set_user_id("alice");
  req.set_surface("a b");
  EXPECT_THAT(handlers_->GetUserStats(req, &resp), InvalidAt("surface"));
}

// --- DeleteUser -------------------------------------------------------------

TEST_F(ExposureFilterHandlersTest, DeleteUserForgetsTheUserOnThatSurface) {
  ASSERT_THAT(Record({MakeExposure("alice", {1})}), IsOk());
  ASSERT_THAT(Record({MakeExposure("alice", {1})}, "video"), IsOk());
  DeleteUserRequest req;
  req.set_surface("homefeed");
  req.set_user_id("alice");
  DeleteUserResponse resp;
  ASSERT_THAT(handlers_->DeleteUser(req, &resp), IsOk());
  EXPECT_TRUE(resp.existed());
  ASSERT_THAT(handlers_->DeleteUser(req, &resp), IsOk());
  EXPECT_FALSE(resp.existed());
  EXPECT_THAT(Filter(MakeFilterRequest("alice", {1})).kept_ids(),
              ElementsAre(1));
  EXPECT_THAT(Filter(MakeFilterRequest("alice", {1}, {}, exposure::v1::KEPT_IDS,
                                       "video"))
                  .kept_ids(),
              IsEmpty());
  req.set_surface("never-written");
  ASSERT_THAT(handlers_->DeleteUser(req, &resp), IsOk());
  EXPECT_FALSE(resp.existed());
  EXPECT_EQ(ServerStats().surface_stats_size(), 2);
}

TEST_F(ExposureFilterHandlersTest, DeleteUserValidation) {
  DeleteUserRequest req;
  DeleteUserResponse resp;
  EXPECT_THAT(handlers_->DeleteUser(req, &resp), InvalidAt("user_id"));
  req.set_user_id("alice");
  req.set_surface("UPPER");
  EXPECT_THAT(handlers_->DeleteUser(req, &resp), InvalidAt("surface"));
}

// --- GetServerStats ---------------------------------------------------------

TEST_F(ExposureFilterHandlersTest, GetServerStatsCountsSinceStart) {
  const int64_t too_old =
      kNowMs - absl::ToInt64Milliseconds(FilterPolicyOptions{}.retention) - 1;
  ASSERT_THAT(Record({MakeExposure("alice", {1, 2, 3}),
                      MakeExposure("bob", {4, 5}, {}, too_old)}),
              IsOk());
  ASSERT_THAT(Record({MakeExposure("carol", {1})}, "video"), IsOk());
  Filter(MakeFilterRequest("alice", {1, 2, 9, 10}));
  Filter(MakeFilterRequest("alice", {3}, {}, exposure::v1::KEEP_MASK));
  // Rejected requests count nothing.
  EXPECT_FALSE(Record({MakeExposure("dave", {1}), MakeExposure("", {})}).ok());
  EXPECT_FALSE(FilterStatus(MakeFilterRequest("", {1, 2})).ok());
  clock_.Advance(absl::Milliseconds(1500));

  const GetServerStatsResponse stats = ServerStats();
  EXPECT_EQ(stats.items_recorded(), 4u);
  EXPECT_EQ(stats.items_expired(), 2u);
  EXPECT_EQ(stats.candidates_checked(), 5u);
  EXPECT_EQ(stats.candidates_removed(), 3u);
  EXPECT_EQ(stats.uptime_ms(), 1500);
  EXPECT_EQ(stats.users(), 2u);
  EXPECT_GT(stats.bytes(), 0u);

  EXPECT_EQ(stats.shards(), static_cast<uint32_t>(kShards));
  ASSERT_EQ(stats.shard_stats_size(), kShards);
  uint64_t users = 0, bytes = 0;
  for (int i = 0; i < kShards; ++i) {
    EXPECT_EQ(stats.shard_stats(i).shard(), static_cast<uint32_t>(i));
    users += stats.shard_stats(i).users();
    bytes += stats.shard_stats(i).bytes();
  }
  EXPECT_EQ(users, stats.users());
  EXPECT_EQ(bytes, stats.bytes());

  ASSERT_EQ(stats.surface_stats_size(), 2);
  const exposure::v1::SurfaceStats& home = stats.surface_stats(0);
  const exposure::v1::SurfaceStats& video = stats.surface_stats(1);
  EXPECT_EQ(home.surface(), "homefeed");
  EXPECT_EQ(video.surface(), "video");
  EXPECT_EQ(home.users(), 1u);
  EXPECT_EQ(video.users(), 1u);
  EXPECT_EQ(home.bytes() + video.bytes(), stats.bytes());
  EXPECT_EQ(home.false_positive_rate(), 0.01);
  EXPECT_EQ(home.retention_ms(), 30 * 86'400'000LL);
  EXPECT_EQ(home.slice_span_ms(), 5 * 86'400'000LL);
}

}  // namespace
}  // namespace exposure_filter
