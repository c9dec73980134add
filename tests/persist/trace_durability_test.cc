// Traced users survive restarts: the trace log records' codec,
// the snapshot carrying TraceLog::Export(), log replay of every trace
// change, no entry replayed twice across a snapshot, and the traced_since
// reset when recovery cannot vouch for the trace.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/persist/store_durability.h"
#include "src/persist/trace_wal_record.h"
#include "src/store/trace_log.h"
#include "tests/persist/persist_test_util.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAre;
using testing_util::IdHashes;
using testing_util::kStartMs;
using testing_util::ReadFile;
using testing_util::RecordOne;
using testing_util::StoreUnderTest;
using testing_util::TempDir;
using testing_util::WriteFile;

TEST(TraceWalRecordTest, EveryTypeRoundTrips) {
  std::string body;
  TraceWalRecord r;
  const std::vector<absl::string_view> ids = {"alice", "bob"};
  EncodeTraceAdd(ids, 1234, &body);
  ASSERT_TRUE(DecodeTraceWalRecord(kWalTraceAdd, body, &r).ok());
  EXPECT_EQ(r.type, kWalTraceAdd);
  EXPECT_EQ(r.traced_since_ms, 1234);
  EXPECT_THAT(r.user_ids, ElementsAre("alice", "bob"));

  body.clear();
  EncodeTraceRemove(ids, &body);
  ASSERT_TRUE(DecodeTraceWalRecord(kWalTraceRemove, body, &r).ok());
  EXPECT_THAT(r.user_ids, ElementsAre("alice", "bob"));

  body.clear();
  const std::vector<uint64_t> items = {7, 1ull << 63};
  const std::vector<absl::string_view> keys = {"sku-1", "sku-22"};
  EncodeTraceRecord("home", "alice", 5000, 9000, items, keys, &body);
  ASSERT_TRUE(DecodeTraceWalRecord(kWalTraceRecord, body, &r).ok());
  EXPECT_EQ(r.surface, "home");
  EXPECT_EQ(r.user_id, "alice");
  EXPECT_EQ(r.event_ms, 5000);
  EXPECT_EQ(r.expires_at_ms, 9000);
  EXPECT_THAT(r.item_ids, ElementsAre(7u, 1ull << 63));
  EXPECT_THAT(r.item_keys, ElementsAre("sku-1", "sku-22"));

  body.clear();
  EncodeTraceDrop("video", "bob", &body);
  ASSERT_TRUE(DecodeTraceWalRecord(kWalTraceDrop, body, &r).ok());
  EXPECT_EQ(r.surface, "video");
  EXPECT_EQ(r.user_id, "bob");
}

TEST(TraceWalRecordTest, MalformedBodiesAreDataLoss) {
  std::string body;
  const std::vector<uint64_t> items = {1, 2, 3};
  const std::vector<absl::string_view> keys = {"k"};
  EncodeTraceRecord("home", "alice", 5000, 9000, items, keys, &body);
  TraceWalRecord r;
  for (size_t cut = 0; cut < body.size(); ++cut) {
    EXPECT_TRUE(absl::IsDataLoss(
        DecodeTraceWalRecord(kWalTraceRecord, body.substr(0, cut), &r)))
        << "cut at " << cut;
  }
  EXPECT_TRUE(
      absl::IsDataLoss(DecodeTraceWalRecord(kWalTraceRecord, body + "x", &r)));
  EXPECT_TRUE(absl::IsDataLoss(DecodeTraceWalRecord(1, body, &r)));
  // A count larger than the body could hold is refused before allocating.
  std::string huge;
  const std::vector<absl::string_view> none;
  EncodeTraceRemove(none, &huge);
  huge[3] = '\x7f';
  EXPECT_TRUE(
      absl::IsDataLoss(DecodeTraceWalRecord(kWalTraceRemove, huge, &r)));
  // Empty user ids are never logged.
  std::string empty;
  const std::vector<absl::string_view> blank = {""};
  EncodeTraceAdd(blank, 1, &empty);
  EXPECT_TRUE(absl::IsDataLoss(DecodeTraceWalRecord(kWalTraceAdd, empty, &r)));
}

class TraceDurabilityTest : public ::testing::Test {
 protected:
  // One server lifetime. `trace` is declared before `d`, which uses it.
  struct Life {
    explicit Life(ManualClock* clock) : s(clock) {}
    StoreUnderTest s;
    TraceLog trace{TraceLimits{}};
    std::unique_ptr<StoreDurability> d;
    RecoveryReport report;
    absl::Status status;
  };

  std::unique_ptr<Life> Boot() {
    auto life = std::make_unique<Life>(&clock_);
    DurabilityOptions o;
    o.data_dir = tmp_.path() + "/data";
    o.fsync = FsyncPolicy::kAlways;
    o.snapshot_interval = absl::ZeroDuration();
    o.snapshot_wal_bytes = 0;
    auto d =
        StoreDurability::Open(o, life->s.surfaces.get(), life->s.store.get());
    if (!d.ok()) {
      life->status = d.status();
      return life;
    }
    life->d = *std::move(d);
    life->d->AttachTraceLog(&life->trace);
    auto report = life->d->Recover();
    if (!report.ok()) {
      life->status = report.status();
      return life;
    }
    life->report = *std::move(report);
    return life;
  }

  // What RecordExposure does for one traced user: the store logs the
  // exposure, the trace its entries, one commit covers both.
  void Record(Life& l, const std::string& user, std::vector<uint64_t> ids,
              bool trace = true) {
    const Surface& home = l.s.surface("home");
    RecordOne(*l.s.store, home, user, IdHashes(ids.front(), 1));
    if (trace) {
      const TracedExposure e{
          user, ids, {}, clock_.NowMs(), clock_.NowMs() + kExpiresInMs};
      l.trace.Record("home", {&e, 1});
    }
    ASSERT_TRUE(l.d->Commit().ok());
  }

  std::vector<int64_t> Times(Life& l, const std::string& user, uint64_t id) {
    TraceLookup out;
    const uint64_t ids[] = {id};
    if (!l.trace.Lookup("home", user, ids, {}, clock_.NowMs(), &out)) {
      return {-1};
    }
    return out.exposure_times_ms[0];
  }
  int64_t Since(Life& l, const std::string& user) {
    for (const TracedUserInfo& u : l.trace.List()) {
      if (u.user_id == user) return u.traced_since_ms;
    }
    return -1;
  }

  static constexpr int64_t kExpiresInMs = 3'600'000;
  TempDir tmp_;
  ManualClock clock_{kStartMs};
};

TEST_F(TraceDurabilityTest, LogAloneRestoresTracedUsersAndExactEntries) {
  const int64_t t0 = clock_.NowMs();
  {
    auto l = Boot();
    ASSERT_TRUE(l->status.ok()) << l->status;
    l->trace.SetJournal(l->d.get());  // Recover() did; harmless again
    ASSERT_TRUE(l->trace.Add({"alice", "bob"}, t0).ok());
    clock_.Advance(absl::Seconds(5));
    Record(*l, "alice", {42});
    clock_.Advance(absl::Seconds(5));
    Record(*l, "alice", {42});
    l->d.reset();  // as after kill -9: only the log has it
  }
  clock_.Advance(absl::Seconds(1));
  auto l = Boot();
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_FALSE(l->report.trace_reset);
  EXPECT_EQ(l->report.trace_users, 2u);
  EXPECT_EQ(l->report.trace_records, 3u);
  EXPECT_THAT(Times(*l, "alice", 42), ElementsAre(t0 + 5000, t0 + 10000));
  EXPECT_EQ(Since(*l, "alice"), t0);
  EXPECT_EQ(Since(*l, "bob"), t0);
}

TEST_F(TraceDurabilityTest, SnapshotCarriesTheTraceAndNothingReplaysTwice) {
  const int64_t t0 = clock_.NowMs();
  {
    auto l = Boot();
    ASSERT_TRUE(l->trace.Add({"alice"}, t0).ok());
    Record(*l, "alice", {1});
    ASSERT_TRUE(l->d->Snapshot().ok());
    clock_.Advance(absl::Seconds(1));
    Record(*l, "alice", {1});
    l->d.reset();  // snapshot + tail
  }
  {
    auto l = Boot();
    ASSERT_TRUE(l->status.ok()) << l->status;
    EXPECT_GT(l->report.snapshot_seq, 0u);
    EXPECT_EQ(l->report.trace_entries, 1u);  // from the snapshot
    EXPECT_EQ(l->report.trace_records, 1u);  // the tail
    EXPECT_FALSE(l->report.trace_reset);
    EXPECT_TRUE(l->report.metadata.empty());  // the export is not echoed
    EXPECT_THAT(Times(*l, "alice", 1), ElementsAre(t0, t0 + 1000));
    ASSERT_TRUE(l->d->Close(/*final_snapshot=*/true).ok());
  }
  auto l = Boot();  // clean restart: all from the final snapshot
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_EQ(l->report.trace_records, 0u);
  EXPECT_THAT(Times(*l, "alice", 1), ElementsAre(t0, t0 + 1000));
  EXPECT_EQ(Since(*l, "alice"), t0);
}

TEST_F(TraceDurabilityTest, RemoveAndDeleteUserReplayInOrder) {
  {
    auto l = Boot();
    ASSERT_TRUE(l->trace.Add({"alice", "bob"}, clock_.NowMs()).ok());
    Record(*l, "alice", {1});
    Record(*l, "bob", {2});
    // DeleteUser as the handler does it: the store, then the trace.
    ASSERT_TRUE(l->s.store->DeleteUser(l->s.surface("home"), "alice"));
    l->trace.DropUserEntries("home", "alice");
    clock_.Advance(absl::Seconds(1));
    Record(*l, "alice", {3});
    const std::string bob[] = {"bob"};
    EXPECT_EQ(l->trace.Remove(bob), 1u);
    ASSERT_TRUE(l->d->Commit().ok());
    l->d.reset();
  }
  auto l = Boot();
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_TRUE(Times(*l, "alice", 1).empty());
  EXPECT_THAT(Times(*l, "alice", 3), ElementsAre(clock_.NowMs()));
  EXPECT_THAT(Times(*l, "bob", 2), ElementsAre(-1));  // not traced
  EXPECT_FALSE(l->trace.IsTraced("bob"));
}

TEST_F(TraceDurabilityTest, ExposureLoggedWithoutItsTraceRecordResetsSince) {
  const int64_t t0 = clock_.NowMs();
  {
    auto l = Boot();
    ASSERT_TRUE(l->trace.Add({"alice"}, t0).ok());
    Record(*l, "alice", {1});
    // The process died between the store's and the trace's append.
    Record(*l, "alice", {2}, /*trace=*/false);
    l->d.reset();
  }
  clock_.Advance(absl::Seconds(30));
  auto l = Boot();
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_TRUE(l->report.trace_reset);
  EXPECT_EQ(Since(*l, "alice"), clock_.NowMs());
  EXPECT_THAT(Times(*l, "alice", 1), ElementsAre(t0));  // entries kept
}

TEST_F(TraceDurabilityTest, TornTailResetsTracedSince) {
  const int64_t t0 = clock_.NowMs();
  {
    auto l = Boot();
    ASSERT_TRUE(l->trace.Add({"alice"}, t0).ok());
    Record(*l, "alice", {1});
    Record(*l, "alice", {2});
    l->d.reset();
  }
  std::vector<std::string> segs;
  for (const auto& e :
       std::filesystem::directory_iterator(tmp_.path() + "/data")) {
    if (e.path().filename().string().rfind("wal-", 0) == 0) {
      segs.push_back(e.path().string());
    }
  }
  std::sort(segs.begin(), segs.end());
  const std::string data = ReadFile(segs.back());
  WriteFile(segs.back(), data.substr(0, data.size() - 3));
  clock_.Advance(absl::Seconds(30));
  auto l = Boot();
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_EQ(l->report.torn_tails, 1u);
  EXPECT_TRUE(l->report.trace_reset);
  EXPECT_EQ(Since(*l, "alice"), clock_.NowMs());
  EXPECT_THAT(Times(*l, "alice", 1), ElementsAre(t0));
}

TEST_F(TraceDurabilityTest, AgedOutEntriesAreNotRestored) {
  {
    auto l = Boot();
    ASSERT_TRUE(l->trace.Add({"alice"}, clock_.NowMs()).ok());
    Record(*l, "alice", {1});
    ASSERT_TRUE(l->d->Close(/*final_snapshot=*/true).ok());
  }
  clock_.Advance(absl::Milliseconds(kExpiresInMs + 1));
  auto l = Boot();
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_TRUE(l->trace.IsTraced("alice"));
  EXPECT_TRUE(Times(*l, "alice", 1).empty());
}

}  // namespace
}  // namespace exposure_filter
