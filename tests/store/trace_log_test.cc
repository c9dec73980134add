#include "src/store/trace_log.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

constexpr int64_t kT0 = 1'700'000'000'000;  // Unix ms
constexpr int64_t kExpiry = kT0 + 1'000'000;

TracedExposure Exposure(absl::string_view user,
                        const std::vector<uint64_t>& ids,
                        const std::vector<absl::string_view>& keys,
                        int64_t event_ms, int64_t expires_ms = kExpiry) {
  return TracedExposure{user, ids, keys, event_ms, expires_ms};
}

// Times recorded for each item (ids first, then keys); fails if untraced.
std::vector<std::vector<int64_t>> Times(
    const TraceLog& log, absl::string_view surface, absl::string_view user,
    const std::vector<uint64_t>& ids,
    const std::vector<absl::string_view>& keys, int64_t now = kT0) {
  TraceLookup out;
  EXPECT_TRUE(log.Lookup(surface, user, ids, keys, now, &out)) << user;
  return out.exposure_times_ms;
}

TEST(TraceLogTest, RecordsOnlyTracedUsers) {
  TraceLog log(TraceLimits{});
  ASSERT_EQ(*log.Add({"alice"}, kT0), 1u);
  const std::vector<uint64_t> ids = {1, 2};
  const std::vector<absl::string_view> keys = {"v:9"};
  const std::vector<TracedExposure> batch = {
      Exposure("alice", ids, keys, kT0 - 5), Exposure("bob", ids, keys, kT0)};
  log.Record("homefeed", batch);
  EXPECT_TRUE(log.IsTraced("alice"));
  EXPECT_FALSE(log.IsTraced("bob"));
  TraceLookup out;
  EXPECT_FALSE(log.Lookup("homefeed", "bob", {1}, {}, kT0, &out));
  EXPECT_THAT(Times(log, "homefeed", "alice", {1, 3}, {"v:9", "1"}),
              ElementsAre(ElementsAre(kT0 - 5), IsEmpty(), ElementsAre(kT0 - 5),
                          IsEmpty()));
  ASSERT_EQ(log.List().size(), 1u);
  EXPECT_EQ(log.List()[0].entries, 3u);
  EXPECT_GT(log.List()[0].bytes, 0u);
}

TEST(TraceLogTest, TimesAreSortedAndDuplicateQueriesAnswered) {
  TraceLog log(TraceLimits{});
  ASSERT_TRUE(log.Add({"u"}, kT0).ok());
  const std::vector<uint64_t> ids = {7};
  log.Record("", {Exposure("u", ids, {}, kT0 + 9)});
  log.Record("", {Exposure("u", ids, {}, kT0 + 1)});
  EXPECT_THAT(Times(log, "", "u", {7, 7}, {}),
              ElementsAre(ElementsAre(kT0 + 1, kT0 + 9),
                          ElementsAre(kT0 + 1, kT0 + 9)));
}

TEST(TraceLogTest, SurfacesAreSeparate) {
  TraceLog log(TraceLimits{});
  ASSERT_TRUE(log.Add({"u"}, kT0).ok());
  const std::vector<uint64_t> ids = {7};
  log.Record("video", {Exposure("u", ids, {}, kT0)});
  EXPECT_THAT(Times(log, "homefeed", "u", {7}, {}), ElementsAre(IsEmpty()));
  EXPECT_THAT(Times(log, "video", "u", {7}, {}), ElementsAre(ElementsAre(kT0)));
}

TEST(TraceLogTest, MaxUsersIsAllOrNothing) {
  TraceLog log(TraceLimits{/*max_users=*/2, /*max_entries_per_user=*/10});
  ASSERT_EQ(*log.Add({"a"}, kT0), 1u);
  absl::StatusOr<size_t> r = log.Add({"b", "c"}, kT0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(r.status()), HasSubstr("--trace_max_users=2"));
  EXPECT_EQ(log.size(), 1u);
  EXPECT_FALSE(log.IsTraced("b"));
  // Already-traced and repeated ids do not count twice.
  EXPECT_EQ(*log.Add({"a", "b", "b"}, kT0), 1u);
  EXPECT_EQ(log.size(), 2u);
}

TEST(TraceLogTest, AddKeepsTheOriginalTracingStart) {
  TraceLog log(TraceLimits{});
  ASSERT_TRUE(log.Add({"a"}, kT0).ok());
  ASSERT_TRUE(log.Add({"a"}, kT0 + 100).ok());
  EXPECT_EQ(log.List()[0].traced_since_ms, kT0);
}

TEST(TraceLogTest, EntryCapDropsOldestAndCounts) {
  TraceLog log(TraceLimits{10, /*max_entries_per_user=*/3});
  ASSERT_TRUE(log.Add({"u"}, kT0).ok());
  const std::vector<uint64_t> ids = {1, 2, 3, 4, 5};
  log.Record("", {Exposure("u", ids, {}, kT0)});
  TraceLookup out;
  ASSERT_TRUE(log.Lookup("", "u", ids, {}, kT0, &out));
  EXPECT_EQ(out.entries_dropped, 2u);
  EXPECT_THAT(out.exposure_times_ms,
              ElementsAre(IsEmpty(), IsEmpty(), ElementsAre(kT0),
                          ElementsAre(kT0), ElementsAre(kT0)));
  EXPECT_EQ(log.List()[0].entries, 3u);
}

TEST(TraceLogTest, ZeroEntryCapKeepsNothingButCounts) {
  TraceLog log(TraceLimits{10, 0});
  ASSERT_TRUE(log.Add({"u"}, kT0).ok());
  const std::vector<uint64_t> ids = {1, 2};
  log.Record("", {Exposure("u", ids, {}, kT0)});
  EXPECT_EQ(log.List()[0].entries, 0u);
  EXPECT_EQ(log.List()[0].entries_dropped, 2u);
  EXPECT_EQ(log.List()[0].bytes, 0u);
}

TEST(TraceLogTest, AgesOutLikeSlices) {
  TraceLog log(TraceLimits{});
  ASSERT_TRUE(log.Add({"u"}, kT0).ok());
  const std::vector<uint64_t> ids = {1};
  const std::vector<uint64_t> ids2 = {2};
  log.Record("", {Exposure("u", ids, {}, kT0, /*expires_ms=*/kT0 + 10),
                  Exposure("u", ids2, {}, kT0, /*expires_ms=*/kT0 + 20)});
  // Not reported once expired, even before the sweep frees it.
  EXPECT_THAT(Times(log, "", "u", {1, 2}, {}, kT0 + 10),
              ElementsAre(IsEmpty(), ElementsAre(kT0)));
  EXPECT_EQ(log.DropExpired(kT0 + 9), 0u);
  EXPECT_EQ(log.DropExpired(kT0 + 10), 1u);
  EXPECT_EQ(log.List()[0].entries, 1u);
  EXPECT_EQ(log.DropExpired(kT0 + 20), 1u);
  EXPECT_EQ(log.List()[0].entries, 0u);
  EXPECT_EQ(log.List()[0].bytes, 0u);
  EXPECT_TRUE(log.IsTraced("u"));  // tracing outlives its entries
}

TEST(TraceLogTest, RemoveForgetsEntries) {
  TraceLog log(TraceLimits{});
  ASSERT_TRUE(log.Add({"u", "v"}, kT0).ok());
  const std::vector<uint64_t> ids = {1};
  log.Record("", {Exposure("u", ids, {}, kT0)});
  EXPECT_EQ(log.Remove({"u", "nobody"}), 1u);
  EXPECT_EQ(log.size(), 1u);
  ASSERT_TRUE(log.Add({"u"}, kT0 + 5).ok());
  EXPECT_THAT(Times(log, "", "u", {1}, {}), ElementsAre(IsEmpty()));
}

TEST(TraceLogTest, DropUserEntriesOnlyThatSurface) {
  TraceLog log(TraceLimits{});
  ASSERT_TRUE(log.Add({"u"}, kT0).ok());
  const std::vector<uint64_t> ids = {1};
  log.Record("a", {Exposure("u", ids, {}, kT0)});
  log.Record("b", {Exposure("u", ids, {}, kT0)});
  log.DropUserEntries("a", "u");
  EXPECT_THAT(Times(log, "a", "u", {1}, {}), ElementsAre(IsEmpty()));
  EXPECT_THAT(Times(log, "b", "u", {1}, {}), ElementsAre(ElementsAre(kT0)));
  EXPECT_TRUE(log.IsTraced("u"));
}

TEST(TraceLogTest, ExportImportRoundTrip) {
  TraceLog log(TraceLimits{10, 2});
  ASSERT_TRUE(log.Add({"u", "v"}, kT0).ok());
  const std::vector<uint64_t> ids = {1, 2, 3};
  const std::vector<absl::string_view> keys = {
      "a-key-longer-than-fifteen-bytes"};
  log.Record("video", {Exposure("u", ids, keys, kT0 - 7)});
  const std::string bytes = log.Export();

  TraceLog restored(TraceLimits{10, 2});
  absl::StatusOr<TraceImportSummary> s = restored.Import(bytes, kT0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->users, 2u);
  EXPECT_EQ(s->entries, 2u);
  EXPECT_EQ(s->entries_dropped, 0u);
  ASSERT_EQ(restored.List().size(), 2u);
  const TracedUserInfo before = log.List()[0];
  const TracedUserInfo after = restored.List()[0];
  EXPECT_EQ(after.user_id, "u");
  EXPECT_EQ(after.traced_since_ms, before.traced_since_ms);
  EXPECT_EQ(after.entries, before.entries);
  EXPECT_EQ(after.entries_dropped, before.entries_dropped);
  EXPECT_EQ(after.bytes, before.bytes);
  EXPECT_THAT(Times(restored, "video", "u", {3}, keys),
              ElementsAre(ElementsAre(kT0 - 7), ElementsAre(kT0 - 7)));
  EXPECT_EQ(restored.Export().size(), bytes.size());
}

TEST(TraceLogTest, ImportAppliesCurrentLimitsAndAging) {
  TraceLog log(TraceLimits{10, 100});
  ASSERT_TRUE(log.Add({"u", "v", "w"}, kT0).ok());
  const std::vector<uint64_t> ids = {1, 2, 3, 4};
  log.Record("", {Exposure("u", ids, {}, kT0, kT0 + 50)});
  const std::vector<uint64_t> old = {9};
  log.Record("", {Exposure("u", old, {}, kT0, kT0 + 5)});

  TraceLog smaller(TraceLimits{2, 3});
  absl::StatusOr<TraceImportSummary> s = smaller.Import(log.Export(), kT0 + 5);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->users, 2u);
  EXPECT_EQ(s->users_skipped, 1u);
  EXPECT_TRUE(smaller.IsTraced("u"));  // the first two ids are kept
  EXPECT_TRUE(smaller.IsTraced("v"));
  EXPECT_FALSE(smaller.IsTraced("w"));
  // Of u's five entries one aged out and one is beyond the cap of 3.
  EXPECT_EQ(s->entries, 3u);
  EXPECT_EQ(s->entries_dropped, 2u);
  EXPECT_EQ(smaller.List()[0].entries_dropped, 1u);
}

TEST(TraceLogTest, ImportRejectsCorruptBytesAndKeepsState) {
  TraceLog log(TraceLimits{});
  ASSERT_TRUE(log.Add({"u"}, kT0).ok());
  const std::vector<uint64_t> ids = {1};
  log.Record("", {Exposure("u", ids, {}, kT0)});
  const std::string good = log.Export();

  TraceLog target(TraceLimits{});
  ASSERT_TRUE(target.Add({"keep-me"}, kT0).ok());
  std::vector<std::string> bad = {"", "XXXX", good.substr(0, good.size() - 1),
                                  good + "x"};
  std::string bad_version = good;
  bad_version[4] = 9;
  bad.push_back(bad_version);
  // Every truncation point fails cleanly.
  for (size_t n = 0; n < good.size(); ++n) bad.push_back(good.substr(0, n));
  for (const std::string& b : bad) {
    absl::StatusOr<TraceImportSummary> s = target.Import(b, kT0);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << b.size();
  }
  EXPECT_TRUE(target.IsTraced("keep-me"));
  EXPECT_FALSE(target.IsTraced("u"));
}

TEST(TraceLogTest, ConcurrentRecordLookupAndAdmin) {
  TraceLog log(TraceLimits{100, 50});
  ASSERT_TRUE(log.Add({"u"}, kT0).ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&log, t] {
      const std::vector<uint64_t> ids = {static_cast<uint64_t>(t)};
      for (int i = 0; i < 500; ++i) {
        log.Record("", {Exposure("u", ids, {}, kT0 + i)});
        TraceLookup out;
        log.Lookup("", "u", ids, {}, kT0, &out);
        if (i % 50 == 0) {
          const std::string other = "x" + std::to_string(t);
          (void)log.Add({other}, kT0);
          log.Remove({other});
          log.DropExpired(kT0);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const TracedUserInfo u = log.List()[0];
  EXPECT_EQ(u.entries, 50u);
  EXPECT_EQ(u.entries + u.entries_dropped, 2000u);
}

}  // namespace
}  // namespace exposure_filter
