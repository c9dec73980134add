// Recovery of a whole store: snapshot + log tail, in order, with aging, the
// fallback when the newest snapshot is damaged, corruption and strict mode,
// missing and extra files, and the data_dir lock.
#include "src/persist/store_durability.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/persist/persist_test_util.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using ::testing::Each;
using ::testing::Eq;
using ::testing::HasSubstr;
using testing_util::CountRemoved;
using testing_util::IdHashes;
using testing_util::KeepMask;
using testing_util::kStartMs;
using testing_util::ReadFile;
using testing_util::RecordOne;
using testing_util::StoreUnderTest;
using testing_util::TempDir;
using testing_util::WriteFile;

class StoreDurabilityTest : public ::testing::Test {
 protected:
  // One server lifetime: a fresh store recovered from the data dir.
  struct Life {
    StoreUnderTest s;
    std::unique_ptr<StoreDurability> d;
    RecoveryReport report;
    absl::Status status;
  };

  std::unique_ptr<Life> Boot(bool strict = false) {
    auto life = std::make_unique<Life>(
        Life{StoreUnderTest(&clock_), nullptr, {}, absl::OkStatus()});
    DurabilityOptions o;
    o.data_dir = dir();
    o.fsync = FsyncPolicy::kAlways;
    o.snapshot_interval = absl::ZeroDuration();  // only when asked
    o.snapshot_wal_bytes = 0;
    o.strict_recovery = strict;
    auto d =
        StoreDurability::Open(o, life->s.surfaces.get(), life->s.store.get());
    if (!d.ok()) {
      life->status = d.status();
      return life;
    }
    life->d = *std::move(d);
    auto report = life->d->Recover();
    if (!report.ok()) {
      life->status = report.status();
      return life;
    }
    life->report = *std::move(report);
    return life;
  }

  void Record(Life& l, const std::string& user, uint64_t first, int n,
              const std::string& surface = "home") {
    RecordOne(*l.s.store, l.s.surface(surface), user, IdHashes(first, n));
    ASSERT_TRUE(l.d->Commit().ok());
  }
  int Remembered(Life& l, const std::string& user, uint64_t first, int n,
                 const std::string& surface = "home") {
    return CountRemoved(
        KeepMask(*l.s.store, l.s.surface(surface), user, IdHashes(first, n)));
  }
  std::string dir() const { return tmp_.path() + "/data"; }
  std::vector<std::string> Files(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir())) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0) out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  TempDir tmp_;
  ManualClock clock_{kStartMs};
};

TEST_F(StoreDurabilityTest, LogAloneRestoresEveryCommittedWrite) {
  {
    auto l = Boot();
    ASSERT_TRUE(l->status.ok()) << l->status;
    Record(*l, "alice", 1, 100);
    Record(*l, "bob", 1000, 10, "video");
    // No Close: as after kill -9, only the log has it.
    l->d.reset();
  }
  auto l = Boot();
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_EQ(l->report.snapshot_seq, 0u);
  EXPECT_EQ(l->report.wal_records, 2u);
  EXPECT_EQ(Remembered(*l, "alice", 1, 100), 100);
  EXPECT_EQ(Remembered(*l, "bob", 1000, 10, "video"), 10);
  EXPECT_EQ(Remembered(*l, "bob", 1000, 10), 0);  // other surface
}

TEST_F(StoreDurabilityTest, DeletesReplayInTheOrderTheyHappened) {
  {
    auto l = Boot();
    Record(*l, "carol", 1, 20);
    ASSERT_TRUE(l->s.store->DeleteUser(l->s.surface("home"), "carol"));
    ASSERT_TRUE(l->d->Commit().ok());
    Record(*l, "carol", 500, 5);
    l->d.reset();
  }
  auto l = Boot();
  EXPECT_EQ(Remembered(*l, "carol", 1, 20), 0);
  EXPECT_EQ(Remembered(*l, "carol", 500, 5), 5);
}

TEST_F(StoreDurabilityTest, SnapshotPlusTailAndCleanCloseLeavesEmptyTail) {
  {
    auto l = Boot();
    Record(*l, "dave", 1, 50);
    ASSERT_TRUE(l->d->Snapshot().ok());
    Record(*l, "dave", 51, 50);  // only in the log tail
    l->d.reset();
  }
  {
    auto l = Boot();
    ASSERT_TRUE(l->status.ok()) << l->status;
    EXPECT_GT(l->report.snapshot_seq, 0u);
    EXPECT_EQ(l->report.users_loaded, 1u);
    EXPECT_EQ(l->report.wal_records, 1u);
    EXPECT_EQ(Remembered(*l, "dave", 1, 100), 100);
    ASSERT_TRUE(l->d->Close(/*final_snapshot=*/true).ok());
  }
  auto l = Boot();
  EXPECT_EQ(l->report.wal_records, 0u);
  EXPECT_EQ(l->report.users_loaded, 1u);
  EXPECT_EQ(Remembered(*l, "dave", 1, 100), 100);
}

TEST_F(StoreDurabilityTest, KeepsTwoSnapshotsAndTheLogSinceTheOlder) {
  auto l = Boot();
  for (int i = 0; i < 4; ++i) {
    Record(*l, "erin", i * 100, 10);
    ASSERT_TRUE(l->d->Snapshot().ok());
  }
  EXPECT_EQ(Files("snapshot-").size(), 2u);
  // Segments after the older snapshot: the two the newer one covers plus
  // the current one.
  EXPECT_EQ(Files("wal-").size(), 2u);
}

TEST_F(StoreDurabilityTest, DamagedNewestSnapshotFallsBackToThePrevious) {
  {
    auto l = Boot();
    Record(*l, "frank", 1, 30);
    ASSERT_TRUE(l->d->Snapshot().ok());
    Record(*l, "frank", 100, 30);
    ASSERT_TRUE(l->d->Snapshot().ok());
    Record(*l, "frank", 200, 30);
    l->d.reset();
  }
  const std::vector<std::string> snaps = Files("snapshot-");
  ASSERT_EQ(snaps.size(), 2u);
  std::string data = ReadFile(snaps.back());
  data[data.size() / 2] ^= 0x40;
  WriteFile(snaps.back(), data);
  auto l = Boot();
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_EQ(l->report.snapshots_skipped, 1u);
  EXPECT_TRUE(l->report.corrupt);
  EXPECT_THAT(l->report.corruption, HasSubstr("falling back"));
  // Nothing lost: the older snapshot plus the longer log tail.
  EXPECT_EQ(Remembered(*l, "frank", 1, 30), 30);
  EXPECT_EQ(Remembered(*l, "frank", 100, 30), 30);
  EXPECT_EQ(Remembered(*l, "frank", 200, 30), 30);
}

TEST_F(StoreDurabilityTest, StrictRecoveryRefusesADamagedSnapshot) {
  {
    auto l = Boot();
    Record(*l, "gina", 1, 30);
    ASSERT_TRUE(l->d->Snapshot().ok());
    l->d.reset();
  }
  const std::string snap = Files("snapshot-").back();
  std::string data = ReadFile(snap);
  data[40] ^= 1;
  WriteFile(snap, data);
  auto strict = Boot(/*strict=*/true);
  EXPECT_TRUE(absl::IsDataLoss(strict->status)) << strict->status;
  EXPECT_THAT(std::string(strict->status.message()),
              HasSubstr("--strict_recovery"));
  strict.reset();
  auto lenient = Boot();
  EXPECT_TRUE(lenient->status.ok()) << lenient->status;
  // The first snapshot covers the log from segment 1, which was kept.
  EXPECT_EQ(Remembered(*lenient, "gina", 1, 30), 30);
}

TEST_F(StoreDurabilityTest, CorruptLogRecordStopsReplayButTheServerStarts) {
  {
    auto l = Boot();
    Record(*l, "hank", 1, 10);
    Record(*l, "hank", 100, 10);
    Record(*l, "hank", 200, 10);
    l->d.reset();
  }
  const std::string seg = Files("wal-").back();
  std::string data = ReadFile(seg);
  // Inside the second record (header 32, first record ~121 bytes).
  data[32 + 130] ^= 0x01;
  WriteFile(seg, data);
  {
    auto strict = Boot(/*strict=*/true);
    EXPECT_TRUE(absl::IsDataLoss(strict->status)) << strict->status;
  }
  auto l = Boot();
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_TRUE(l->report.corrupt);
  EXPECT_THAT(l->report.corruption, HasSubstr("checksum mismatch"));
  EXPECT_EQ(l->report.wal_records, 1u);
  EXPECT_EQ(Remembered(*l, "hank", 1, 10), 10);
  EXPECT_EQ(Remembered(*l, "hank", 200, 10), 0);
  // New writes after the damage survive the next restart: recovery wrote a
  // snapshot so replay no longer has to pass the damaged record.
  Record(*l, "hank", 300, 10);
  l.reset();
  auto again = Boot();
  ASSERT_TRUE(again->status.ok()) << again->status;
  EXPECT_EQ(Remembered(*again, "hank", 300, 10), 10);
  EXPECT_EQ(Remembered(*again, "hank", 1, 10), 10);
}

TEST_F(StoreDurabilityTest, TornTailIsCutOffAndLaterSegmentsStillReplay) {
  {
    auto l = Boot();
    Record(*l, "ivy", 1, 10);
    Record(*l, "ivy", 100, 10);
    l->d.reset();
  }
  const std::string seg = Files("wal-").back();
  std::string data = ReadFile(seg);
  WriteFile(seg, data.substr(0, data.size() - 7));  // power cut mid-record
  {
    auto l = Boot(/*strict=*/true);  // a torn tail is not corruption
    ASSERT_TRUE(l->status.ok()) << l->status;
    EXPECT_EQ(l->report.torn_tails, 1u);
    EXPECT_GT(l->report.torn_tail_bytes, 0u);
    EXPECT_FALSE(l->report.corrupt);
    EXPECT_EQ(Remembered(*l, "ivy", 1, 10), 10);
    Record(*l, "ivy", 200, 10);  // into the next segment
    l->d.reset();
  }
  auto l = Boot(/*strict=*/true);
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_EQ(l->report.torn_tails, 0u);
  EXPECT_EQ(Remembered(*l, "ivy", 200, 10), 10);
}

TEST_F(StoreDurabilityTest, SegmentTornInsideItsHeaderGetsRepaired) {
  {
    auto l = Boot();
    Record(*l, "iris", 1, 10);
    l->d.reset();
  }
  {
    auto l = Boot();  // opens segment 2
    l->d.reset();
  }
  const std::string seg = Files("wal-").back();
  WriteFile(seg, ReadFile(seg).substr(0, 9));  // died creating it
  {
    auto l = Boot(/*strict=*/true);
    ASSERT_TRUE(l->status.ok()) << l->status;
    EXPECT_EQ(l->report.torn_tails, 1u);
    Record(*l, "iris", 100, 10);  // segment 3
    l->d.reset();
  }
  // Segment 2 is now a complete (empty) segment, not a corrupt one.
  auto l = Boot(/*strict=*/true);
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_EQ(Remembered(*l, "iris", 1, 10), 10);
  EXPECT_EQ(Remembered(*l, "iris", 100, 10), 10);
}

TEST_F(StoreDurabilityTest, MissingLogSegmentStopsReplayAtTheGap) {
  {
    auto l = Boot();
    Record(*l, "jack", 1, 10);
    l->d.reset();
  }
  {
    auto l = Boot();
    Record(*l, "jack", 100, 10);
    l->d.reset();
  }
  {
    auto l = Boot();
    Record(*l, "jack", 200, 10);
    l->d.reset();
  }
  const std::vector<std::string> segs = Files("wal-");
  ASSERT_EQ(segs.size(), 3u);
  std::filesystem::remove(segs[1]);
  auto l = Boot();
  ASSERT_TRUE(l->status.ok()) << l->status;
  EXPECT_TRUE(l->report.corrupt);
  EXPECT_THAT(l->report.corruption, HasSubstr("is missing"));
  EXPECT_EQ(Remembered(*l, "jack", 1, 10), 10);
  EXPECT_EQ(Remembered(*l, "jack", 200, 10), 0);
}

TEST_F(StoreDurabilityTest, AgingAppliesToReplayedRecords) {
  {
    auto l = Boot();
    Record(*l, "kim", 1, 10);
    l->d.reset();
  }
  clock_.Advance(absl::Hours(24 * 40));
  auto l = Boot();
  EXPECT_EQ(l->report.wal_records, 1u);
  EXPECT_EQ(Remembered(*l, "kim", 1, 10), 0);
  EXPECT_EQ(l->s.store->Usage(1).users, 0u);
}

TEST_F(StoreDurabilityTest, SecondOwnerOfTheDataDirIsRefused) {
  auto first = Boot();
  ASSERT_TRUE(first->status.ok());
  auto second = Boot();
  EXPECT_TRUE(absl::IsFailedPrecondition(second->status)) << second->status;
  EXPECT_THAT(std::string(second->status.message()), HasSubstr("in use"));
}

TEST_F(StoreDurabilityTest, SnapshotMetadataComesBack) {
  {
    auto l = Boot();
    l->d->SetMetadataProvider([] {
      return SnapshotMetadata{{"kafka.offsets", "exposures/0=42"}};
    });
    Record(*l, "lee", 1, 1);
    ASSERT_TRUE(l->d->Close(/*final_snapshot=*/true).ok());
  }
  auto l = Boot();
  ASSERT_EQ(l->report.metadata.size(), 1u);
  EXPECT_EQ(l->report.metadata[0].second, "exposures/0=42");
}

}  // namespace
}  // namespace exposure_filter
