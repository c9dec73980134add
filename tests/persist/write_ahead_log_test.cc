// The write-ahead log: what is committed reads back in order; a torn last
// record at any byte offset is skipped and counted; a flipped bit in the
// middle stops replay at the last good record; headers are checked.
#include "src/persist/write_ahead_log.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/persist/data_dir.h"
#include "src/persist/record_frame.h"
#include "src/persist/wal_reader.h"
#include "src/persist/wal_record.h"
#include "tests/persist/persist_test_util.h"

namespace exposure_filter {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::ReadFile;
using testing_util::TempDir;
using testing_util::WriteFile;

struct Seen {
  std::string user;
  int64_t event_ms;
  std::vector<uint64_t> hashes;
  bool deleted;
};

std::vector<Seen> Replay(absl::string_view data, uint64_t seq, bool newest,
                         WalSegmentReplay* out) {
  std::vector<Seen> seen;
  *out = ReplayWalSegment(data, seq, newest, [&](const WalRecord& r) {
    seen.push_back(Seen{std::string(r.user_id), r.event_ms, r.item_hashes,
                        r.type == kWalDeleteUser});
  });
  return seen;
}

class WriteAheadLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = DataDir::Open(tmp_.path() + "/data");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
  }

  // Writes `n` RecordExposure records (user "u<i>", i+1 hashes) to segment 1
  // and returns the file.
  std::string WriteRecords(int n, FsyncPolicy policy = FsyncPolicy::kAlways) {
    ::unlink(dir_->WalPath(1).c_str());
    auto wal = WriteAheadLog::Create(dir_.get(), 1, policy);
    EXPECT_TRUE(wal.ok()) << wal.status();
    for (int i = 0; i < n; ++i) {
      std::string body;
      std::vector<uint64_t> hashes(i + 1, 1000 + i);
      EncodeRecordExposure("home", "u" + std::to_string(i), 1000 + i, hashes,
                           &body);
      (*wal)->Append(kWalRecordExposure, body);
    }
    EXPECT_TRUE((*wal)->Commit().ok());
    EXPECT_TRUE((*wal)->Close().ok());
    return ReadFile(dir_->WalPath(1));
  }

  TempDir tmp_;
  std::unique_ptr<DataDir> dir_;
};

TEST_F(WriteAheadLogTest, CommittedRecordsReadBackInOrder) {
  for (FsyncPolicy policy :
       {FsyncPolicy::kAlways, FsyncPolicy::kInterval, FsyncPolicy::kNever}) {
    const std::string data = WriteRecords(5, policy);
    WalSegmentReplay r;
    const std::vector<Seen> seen = Replay(data, 1, true, &r);
    ASSERT_EQ(seen.size(), 5u);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(seen[i].user, "u" + std::to_string(i));
      EXPECT_EQ(seen[i].event_ms, 1000 + i);
      EXPECT_EQ(seen[i].hashes, std::vector<uint64_t>(i + 1, 1000 + i));
    }
    EXPECT_TRUE(r.corruption.ok());
    EXPECT_EQ(r.torn_bytes, 0u);
    EXPECT_EQ(r.good_bytes, data.size());
    ASSERT_EQ(::unlink(dir_->WalPath(1).c_str()), 0);
  }
}

TEST_F(WriteAheadLogTest, DeleteUserRoundTrips) {
  auto wal = WriteAheadLog::Create(dir_.get(), 1, FsyncPolicy::kNever);
  ASSERT_TRUE(wal.ok());
  std::string body;
  EncodeDeleteUser("video", "alice", &body);
  (*wal)->Append(kWalDeleteUser, body);
  ASSERT_TRUE((*wal)->Commit().ok());
  WalSegmentReplay r;
  const std::vector<Seen> seen =
      Replay(ReadFile(dir_->WalPath(1)), 1, true, &r);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen[0].deleted);
  EXPECT_EQ(seen[0].user, "alice");
}

TEST_F(WriteAheadLogTest, TruncationAtEveryByteOfTheLastRecordIsATornTail) {
  const std::string full = WriteRecords(4);
  const std::string three = WriteRecords(3);  // same content, one fewer
  ASSERT_EQ(full.compare(0, three.size(), three), 0);
  for (size_t cut = three.size(); cut < full.size(); ++cut) {
    WalSegmentReplay r;
    const std::vector<Seen> seen =
        Replay(absl::string_view(full).substr(0, cut), 1, true, &r);
    EXPECT_EQ(seen.size(), 3u) << "cut at " << cut;
    EXPECT_TRUE(r.corruption.ok()) << "cut at " << cut << ": " << r.corruption;
    EXPECT_EQ(r.torn_bytes, cut - three.size()) << "cut at " << cut;
    EXPECT_EQ(r.good_bytes, three.size());
  }
}

TEST_F(WriteAheadLogTest, TornTailInAnOlderSegmentIsCorruption) {
  const std::string full = WriteRecords(2);
  WalSegmentReplay r;
  const std::vector<Seen> seen =
      Replay(absl::string_view(full).substr(0, full.size() - 3), 1, false, &r);
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_TRUE(absl::IsDataLoss(r.corruption));
}

TEST_F(WriteAheadLogTest, BitFlipInTheMiddleStopsAtTheLastGoodRecord) {
  const std::string full = WriteRecords(6);
  const std::string two = WriteRecords(2);
  const std::string three = WriteRecords(3);
  // Every bit of the third record: two records survive, replay stops there.
  for (size_t byte = two.size(); byte < three.size(); ++byte) {
    std::string data = full;
    data[byte] = static_cast<char>(data[byte] ^ 0x10);
    WalSegmentReplay r;
    const std::vector<Seen> seen = Replay(data, 1, true, &r);
    EXPECT_EQ(seen.size(), 2u) << "byte " << byte;
    EXPECT_TRUE(absl::IsDataLoss(r.corruption)) << "byte " << byte;
    EXPECT_THAT(std::string(r.corruption.message()),
                HasSubstr("offset " + std::to_string(two.size())));
    EXPECT_EQ(r.good_bytes, two.size());
  }
}

TEST_F(WriteAheadLogTest, HeaderIsChecked) {
  const std::string full = WriteRecords(2);
  WalSegmentReplay r;
  std::string bad_magic = full;
  bad_magic[0] = 'X';
  EXPECT_TRUE(Replay(bad_magic, 1, true, &r).empty());
  EXPECT_THAT(std::string(r.corruption.message()), HasSubstr("bad magic"));
  std::string bad_sum = full;
  bad_sum[17] ^= 1;
  EXPECT_TRUE(Replay(bad_sum, 1, true, &r).empty());
  EXPECT_TRUE(absl::IsDataLoss(r.corruption));
  // A segment renamed to another number is not replayed as that number.
  EXPECT_TRUE(Replay(full, 2, true, &r).empty());
  EXPECT_THAT(std::string(r.corruption.message()), HasSubstr("segment 1"));
  // Died while creating the newest segment: empty, not an error.
  EXPECT_TRUE(
      Replay(absl::string_view(full).substr(0, 10), 1, true, &r).empty());
  EXPECT_TRUE(r.corruption.ok());
  EXPECT_EQ(r.torn_bytes, 10u);
}

TEST_F(WriteAheadLogTest, UnknownOptionalRecordsAreSkippedRequiredOnesStop) {
  auto wal = WriteAheadLog::Create(dir_.get(), 1, FsyncPolicy::kNever);
  ASSERT_TRUE(wal.ok());
  std::string body;
  EncodeDeleteUser("", "a", &body);
  (*wal)->Append(kWalDeleteUser, body);
  (*wal)->Append(200, "from a newer version, optional");
  (*wal)->Append(kWalDeleteUser, body);
  (*wal)->Append(50, "from a newer version, required");
  (*wal)->Append(kWalDeleteUser, body);
  ASSERT_TRUE((*wal)->Close().ok());
  WalSegmentReplay r;
  EXPECT_EQ(Replay(ReadFile(dir_->WalPath(1)), 1, true, &r).size(), 2u);
  EXPECT_EQ(r.skipped_optional, 1u);
  EXPECT_THAT(std::string(r.corruption.message()),
              HasSubstr("unknown record type 50"));
}

TEST_F(WriteAheadLogTest, RotateClosesTheSegmentAndContinuesInTheNext) {
  auto wal = WriteAheadLog::Create(dir_.get(), 7, FsyncPolicy::kInterval);
  ASSERT_TRUE(wal.ok());
  std::string body;
  EncodeDeleteUser("", "before", &body);
  (*wal)->Append(kWalDeleteUser, body);
  absl::StatusOr<uint64_t> closed = (*wal)->Rotate();
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(*closed, 7u);
  EXPECT_EQ((*wal)->current_segment(), 8u);
  body.clear();
  EncodeDeleteUser("", "after", &body);
  (*wal)->Append(kWalDeleteUser, body);
  ASSERT_TRUE((*wal)->Commit().ok());
  WalSegmentReplay r;
  std::vector<Seen> seven = Replay(ReadFile(dir_->WalPath(7)), 7, false, &r);
  std::vector<Seen> eight = Replay(ReadFile(dir_->WalPath(8)), 8, true, &r);
  ASSERT_EQ(seven.size(), 1u);
  ASSERT_EQ(eight.size(), 1u);
  EXPECT_EQ(seven[0].user, "before");
  EXPECT_EQ(eight[0].user, "after");
  auto listing = dir_->List();
  ASSERT_TRUE(listing.ok());
  EXPECT_THAT(listing->wal_segments, ElementsAre(7, 8));
}

TEST_F(WriteAheadLogTest, ClosedLogRefusesCommits) {
  auto wal = WriteAheadLog::Create(dir_.get(), 1, FsyncPolicy::kAlways);
  ASSERT_TRUE(wal.ok());
  ASSERT_TRUE((*wal)->Close().ok());
  (*wal)->Append(kWalDeleteUser, "x");
  EXPECT_TRUE((*wal)->Commit().ok());  // nothing new was accepted
  EXPECT_FALSE((*wal)->Rotate().ok());
}

// exposure_filter_wal_fsync_seconds is drawn from these buckets: every
// successful fdatasync lands in exactly one, and the latency sum is theirs.
TEST_F(WriteAheadLogTest, EverySyncIsCountedInOneLatencyBucket) {
  auto wal = WriteAheadLog::Create(dir_.get(), 1, FsyncPolicy::kAlways);
  ASSERT_TRUE(wal.ok()) << wal.status();
  constexpr int kCommits = 5;
  for (int i = 0; i < kCommits; ++i) {
    (*wal)->Append(kWalDeleteUser, "u" + std::to_string(i));
    ASSERT_TRUE((*wal)->Commit().ok());
  }
  const WalStats stats = (*wal)->stats();
  EXPECT_EQ(stats.syncs, static_cast<uint64_t>(kCommits));
  uint64_t bucketed = 0;
  for (uint64_t n : stats.sync_buckets) bucketed += n;
  EXPECT_EQ(bucketed, stats.syncs);
  ASSERT_TRUE((*wal)->Close().ok());
}

TEST_F(WriteAheadLogTest, NoSyncsAreCountedWithoutFsync) {
  auto wal = WriteAheadLog::Create(dir_.get(), 1, FsyncPolicy::kNever);
  ASSERT_TRUE(wal.ok()) << wal.status();
  (*wal)->Append(kWalDeleteUser, "u");
  ASSERT_TRUE((*wal)->Commit().ok());
  const WalStats stats = (*wal)->stats();
  EXPECT_EQ(stats.syncs, 0u);
  for (uint64_t n : stats.sync_buckets) EXPECT_EQ(n, 0u);
  ASSERT_TRUE((*wal)->Close().ok());
}

TEST(FsyncPolicyTest, ParsesTheThreeNames) {
  EXPECT_EQ(*ParseFsyncPolicy("always"), FsyncPolicy::kAlways);
  EXPECT_EQ(*ParseFsyncPolicy("interval"), FsyncPolicy::kInterval);
  EXPECT_EQ(*ParseFsyncPolicy("never"), FsyncPolicy::kNever);
  EXPECT_THAT(std::string(ParseFsyncPolicy("sometimes").status().message()),
              HasSubstr("--fsync"));
}

TEST(DataDirTest, ASecondOpenOfTheSameDirectoryIsRefused) {
  TempDir tmp;
  auto first = DataDir::Open(tmp.path() + "/d");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = DataDir::Open(tmp.path() + "/d");
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status()));
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("pid " + std::to_string(::getpid())));
  first->reset();
  EXPECT_TRUE(DataDir::Open(tmp.path() + "/d").ok());
}

TEST(DataDirTest, RemovesTempFilesAndIgnoresForeignOnes) {
  TempDir tmp;
  const std::string d = tmp.path() + "/d";
  { ASSERT_TRUE(DataDir::Open(d).ok()); }
  WriteFile(d + "/snapshot-00000000000000000003.efs.tmp", "half written");
  WriteFile(d + "/README", "operator notes");
  WriteFile(d + "/wal-12.log", "not our name pattern");
  WriteFile(d + "/wal-00000000000000000002.log", "");
  auto dir = DataDir::Open(d);
  ASSERT_TRUE(dir.ok());
  EXPECT_FALSE(
      std::filesystem::exists(d + "/snapshot-00000000000000000003.efs.tmp"));
  EXPECT_TRUE(std::filesystem::exists(d + "/README"));
  auto listing = (*dir)->List();
  ASSERT_TRUE(listing.ok());
  EXPECT_THAT(listing->wal_segments, ElementsAre(2));
  EXPECT_TRUE(listing->snapshots.empty());
}

}  // namespace
}  // namespace exposure_filter
