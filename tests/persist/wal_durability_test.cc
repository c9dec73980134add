// What each --fsync policy promises about an acknowledged write,
// checked on the disk seam (faulty_disk_io.h) rather than on the log's own
// bookkeeping: real fdatasync calls on the segment file, the bytes they
// covered, and what a power cut would leave (the seam drops written but
// unsynced bytes, as losing the page cache does; a kill -9 would not).
//   always    every Commit returns after an fdatasync of the segment that
//             covers the record; a power cut loses nothing acknowledged.
//   interval  the sync thread syncs once per --fsync_interval (the timer is
//             fired by hand here, no sleeping); a power cut loses at most
//             what was acknowledged since the last tick.
//   all       an acknowledged record is in the segment file at once, before
//             any close or snapshot.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/persist/data_dir.h"
#include "src/persist/store_durability.h"
#include "src/persist/sync_timer.h"
#include "src/persist/wal_reader.h"
#include "src/persist/wal_record.h"
#include "src/persist/write_ahead_log.h"
#include "tests/persist/faulty_disk_io.h"
#include "tests/persist/persist_test_util.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using testing_util::CountRemoved;
using testing_util::FaultyDiskIo;
using testing_util::IdHashes;
using testing_util::KeepMask;
using testing_util::kStartMs;
using testing_util::ReadFile;
using testing_util::RecordOne;
using testing_util::StoreUnderTest;
using testing_util::TempDir;

// The users of the RecordExposure records in a segment's bytes, in order.
std::vector<std::string> LoggedUsers(absl::string_view data, uint64_t seq) {
  std::vector<std::string> users;
  ReplayWalSegment(data, seq, /*newest=*/true, [&](const WalRecord& r) {
    if (r.type == kWalRecordExposure) users.push_back(std::string(r.user_id));
  });
  return users;
}

bool Contains(const std::vector<std::string>& users, const std::string& u) {
  return std::find(users.begin(), users.end(), u) != users.end();
}

// The write-ahead log alone, writing through the seam.
class WalDurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = DataDir::Open(data_dir(), &io_);
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
  }
  std::unique_ptr<WriteAheadLog> Create(FsyncPolicy policy) {
    auto wal = WriteAheadLog::Create(dir_.get(), 1, policy);
    EXPECT_TRUE(wal.ok()) << wal.status();
    return wal.ok() ? *std::move(wal) : nullptr;
  }
  static void Append(WriteAheadLog& wal, const std::string& user) {
    std::string body;
    EncodeRecordExposure("home", user, kStartMs, IdHashes(1, 3), &body);
    wal.Append(kWalRecordExposure, body);
  }
  // The segment as a power cut now would leave it.
  std::vector<std::string> UsersAfterPowerLoss() {
    const std::string error = io_.PowerLoss(data_dir(), after_dir());
    EXPECT_EQ(error, "");
    return LoggedUsers(ReadFile(after_dir() + "/" + SegmentName()), 1);
  }
  std::string SegmentName() const {
    const std::string path = dir_->WalPath(1);
    return path.substr(path.rfind('/') + 1);
  }
  std::string data_dir() const { return tmp_.path() + "/data"; }
  std::string after_dir() const { return tmp_.path() + "/after"; }

  TempDir tmp_;
  FaultyDiskIo io_;
  std::unique_ptr<DataDir> dir_;
};

TEST_F(WalDurabilityTest, AlwaysFdatasyncsTheSegmentBeforeEachCommitReturns) {
  auto wal = Create(FsyncPolicy::kAlways);
  ASSERT_NE(wal, nullptr);
  const std::string path = dir_->WalPath(1);
  for (int i = 0; i < 20; ++i) {
    const int syncs_before = io_.SyncCalls(path);
    const std::string user = absl::StrCat("u", i);
    Append(*wal, user);
    ASSERT_TRUE(wal->Commit().ok());
    const std::string file = ReadFile(path);
    EXPECT_GT(io_.SyncCalls(path), syncs_before)
        << "--fsync=always acknowledged commit " << i
        << " without an fdatasync of " << path;
    EXPECT_EQ(io_.SyncedBytes(path), file.size())
        << "--fsync=always acknowledged commit " << i
        << " before an fdatasync covered all of it";
    const std::vector<std::string> synced =
        LoggedUsers(file.substr(0, io_.SyncedBytes(path)), 1);
    EXPECT_TRUE(Contains(synced, user))
        << "acknowledged record of " << user << " is not in the synced bytes";
  }
}

// Group commit: one leader's fdatasync serves many writers. Each writer
// checks, right after its own Commit returns, that the synced bytes hold
// its record.
TEST_F(WalDurabilityTest, AlwaysCoversEveryGroupCommittedWriterBeforeItsAck) {
  auto wal = Create(FsyncPolicy::kAlways);
  ASSERT_NE(wal, nullptr);
  const std::string path = dir_->WalPath(1);
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const std::string user = absl::StrCat("t", t, "-", i);
        Append(*wal, user);
        ASSERT_TRUE(wal->Commit().ok());
        // Synced bytes only grow, so this read cannot miss a record.
        const uint64_t synced = io_.SyncedBytes(path);
        const std::vector<std::string> users =
            LoggedUsers(ReadFile(path).substr(0, synced), 1);
        ASSERT_TRUE(Contains(users, user))
            << "--fsync=always acknowledged " << user
            << " before an fdatasync covered it";
      }
    });
  }
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(LoggedUsers(ReadFile(path), 1).size(), 100u);
}

TEST_F(WalDurabilityTest, AcknowledgedRecordsAreInTheFileBeforeAnyClose) {
  for (FsyncPolicy policy :
       {FsyncPolicy::kAlways, FsyncPolicy::kInterval, FsyncPolicy::kNever}) {
    ::unlink(dir_->WalPath(1).c_str());
    auto wal = Create(policy);
    ASSERT_NE(wal, nullptr);
    for (int i = 0; i < 5; ++i) {
      Append(*wal, absl::StrCat("u", i));
      ASSERT_TRUE(wal->Commit().ok());
      // Read while the log is open: no Close, Sync or Rotate has run.
      const std::vector<std::string> users =
          LoggedUsers(ReadFile(dir_->WalPath(1)), 1);
      ASSERT_EQ(users.size(), static_cast<size_t>(i + 1))
          << "--fsync=" << FsyncPolicyName(policy) << ": acknowledged record "
          << i << " is not in the log file";
      EXPECT_EQ(users.back(), absl::StrCat("u", i));
    }
  }
}

TEST_F(WalDurabilityTest, PowerLossUnderAlwaysLosesNothingAcknowledged) {
  auto wal = Create(FsyncPolicy::kAlways);
  ASSERT_NE(wal, nullptr);
  std::vector<std::string> acknowledged;
  for (int i = 0; i < 30; ++i) {
    acknowledged.push_back(absl::StrCat("u", i));
    Append(*wal, acknowledged.back());
    ASSERT_TRUE(wal->Commit().ok());
  }
  EXPECT_EQ(UsersAfterPowerLoss(), acknowledged)
      << "--fsync=always lost acknowledged records to a power cut";
}

TEST_F(WalDurabilityTest, PowerLossUnderIntervalLosesOnlyWhatFollowsTheSync) {
  auto wal = Create(FsyncPolicy::kInterval);
  ASSERT_NE(wal, nullptr);
  std::vector<std::string> before_sync;
  for (int i = 0; i < 10; ++i) {
    before_sync.push_back(absl::StrCat("a", i));
    Append(*wal, before_sync.back());
    ASSERT_TRUE(wal->Commit().ok());
  }
  // The model is live: acknowledged under `interval` but not yet synced,
  // these are in the page cache only.
  EXPECT_TRUE(UsersAfterPowerLoss().empty());
  ASSERT_TRUE(wal->Sync().ok());  // what the sync thread does every interval
  for (int i = 0; i < 10; ++i) {
    Append(*wal, absl::StrCat("b", i));
    ASSERT_TRUE(wal->Commit().ok());
  }
  EXPECT_EQ(UsersAfterPowerLoss(), before_sync)
      << "a power cut must keep everything the last sync covered and can "
         "only take what was acknowledged after it";
}

// The interval timer, fired by the test instead of the clock.
class ManualSyncTimer final : public SyncTimer {
 public:
  bool Wait(absl::Duration period) override {
    MutexLock lock(&mu_);
    last_period_ = period;
    ++waits_;
    cv_.notify_all();
    const uint64_t ticket = fired_;
    mu_.Await(cv_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return stopped_ || fired_ > ticket;
    });
    return !stopped_;
  }
  void Stop() override {
    {
      MutexLock lock(&mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }
  // Ends one interval and returns once the loop waits for the next one,
  // i.e. once whatever the tick triggered is done. False if the loop never
  // got there (a guard against hanging, not a timing check).
  bool Tick() {
    MutexLock lock(&mu_);
    constexpr std::chrono::seconds kGuard(60);
    if (!mu_.AwaitWithTimeout(cv_, kGuard,
                              [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                return waits_ > fired_;
                              })) {
      return false;
    }
    const uint64_t next_wait = ++fired_ + 1;
    cv_.notify_all();
    return mu_.AwaitWithTimeout(
        cv_, kGuard,
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return waits_ >= next_wait; });
  }
  absl::Duration last_period() {
    MutexLock lock(&mu_);
    return last_period_;
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  uint64_t waits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fired_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration last_period_ ABSL_GUARDED_BY(mu_);
};

// The store and its durability layer, as the RPC handlers use them: an RPC
// applies to the store (which journals to the log) and answers after
// StoreDurability::Commit().
class StoreWalDurabilityTest : public ::testing::Test {
 protected:
  struct Life {
    StoreUnderTest s;
    std::unique_ptr<StoreDurability> d;
  };

  std::unique_ptr<Life> Boot(const std::string& data_dir, FsyncPolicy fsync,
                             DiskIo* io, SyncTimer* timer) {
    auto life = std::make_unique<Life>(Life{StoreUnderTest(&clock_), nullptr});
    DurabilityOptions o;
    o.data_dir = data_dir;
    o.fsync = fsync;
    o.fsync_interval = kInterval;
    o.snapshot_interval = absl::ZeroDuration();  // no snapshot: the power
    o.snapshot_wal_bytes = 0;                    // cut model needs none
    o.disk_io = io;
    o.sync_timer = timer;
    auto d =
        StoreDurability::Open(o, life->s.surfaces.get(), life->s.store.get());
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return life;
    life->d = *std::move(d);
    auto report = life->d->Recover();
    EXPECT_TRUE(report.ok()) << report.status();
    return life;
  }
  // One acknowledged RecordExposure of 3 items for `user`.
  static absl::Status Record(Life& l, const std::string& user) {
    RecordOne(*l.s.store, l.s.surface("home"), user, IdHashes(100, 3));
    return l.d->Commit();
  }
  static bool Remembers(Life& l, const std::string& user) {
    return CountRemoved(KeepMask(*l.s.store, l.s.surface("home"), user,
                                 IdHashes(100, 3))) == 3;
  }
  // The one log segment Recover() opened (no snapshot ever rotates it).
  std::string Segment() const {
    std::string found;
    for (const auto& e : std::filesystem::directory_iterator(data_dir())) {
      const std::string name = e.path().filename().string();
      if (name.rfind("wal-", 0) == 0) found = std::max(found, name);
    }
    return data_dir() + "/" + found;
  }
  uint64_t SegmentSeq() const {
    const std::string name = Segment().substr(data_dir().size() + 5);
    return std::stoull(name.substr(0, name.find('.')));
  }
  std::string data_dir() const { return tmp_.path() + "/data"; }
  std::string after_dir() const { return tmp_.path() + "/after"; }

  static constexpr absl::Duration kInterval = absl::Seconds(1);
  TempDir tmp_;
  ManualClock clock_{kStartMs};
  FaultyDiskIo io_;
  ManualSyncTimer timer_;
};

TEST_F(StoreWalDurabilityTest, AcknowledgedRecordExposureIsInTheLog) {
  for (FsyncPolicy policy :
       {FsyncPolicy::kAlways, FsyncPolicy::kInterval, FsyncPolicy::kNever}) {
    std::filesystem::remove_all(data_dir());
    auto l = Boot(data_dir(), policy, &io_, &timer_);
    ASSERT_NE(l->d, nullptr);
    for (int i = 0; i < 5; ++i) {
      const std::string user = absl::StrCat("user", i);
      ASSERT_TRUE(Record(*l, user).ok());
      // Before any close, snapshot or interval sync.
      EXPECT_TRUE(
          Contains(LoggedUsers(ReadFile(Segment()), SegmentSeq()), user))
          << "--fsync=" << FsyncPolicyName(policy) << ": RecordExposure of "
          << user << " was acknowledged but is not in the write-ahead log";
    }
  }
}

TEST_F(StoreWalDurabilityTest, PowerLossUnderAlwaysLosesNoAcknowledgedWrite) {
  {
    auto l = Boot(data_dir(), FsyncPolicy::kAlways, &io_, nullptr);
    ASSERT_NE(l->d, nullptr);
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(Record(*l, absl::StrCat("user", i)).ok());
    }
    ASSERT_EQ(io_.PowerLoss(data_dir(), after_dir()), "");
  }
  auto after = Boot(after_dir(), FsyncPolicy::kAlways, nullptr, nullptr);
  ASSERT_NE(after->d, nullptr);
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(Remembers(*after, absl::StrCat("user", i)))
        << "--fsync=always: acknowledged write of user" << i
        << " lost to a power cut";
  }
}

TEST_F(StoreWalDurabilityTest, IntervalSyncsOnEveryTickAndLosesAtMostOne) {
  {
    auto l = Boot(data_dir(), FsyncPolicy::kInterval, &io_, &timer_);
    ASSERT_NE(l->d, nullptr);
    for (int tick = 0; tick < 3; ++tick) {
      for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE(Record(*l, absl::StrCat("tick", tick, "-", i)).ok());
      }
      const uint64_t written = ReadFile(Segment()).size();
      const int syncs = io_.SyncCalls(Segment());
      ASSERT_TRUE(timer_.Tick()) << "the sync thread never waited again";
      EXPECT_EQ(timer_.last_period(), kInterval)
          << "the sync thread must wait --fsync_interval between syncs";
      EXPECT_GT(io_.SyncCalls(Segment()), syncs)
          << "--fsync=interval: no fdatasync of the log in interval " << tick;
      EXPECT_GE(io_.SyncedBytes(Segment()), written)
          << "--fsync=interval: the sync at the end of interval " << tick
          << " does not cover the writes acknowledged in it";
    }
    // The last interval: acknowledged, never synced.
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(Record(*l, absl::StrCat("last-", i)).ok());
    }
    ASSERT_EQ(io_.PowerLoss(data_dir(), after_dir()), "");
  }
  auto after = Boot(after_dir(), FsyncPolicy::kInterval, nullptr, nullptr);
  ASSERT_NE(after->d, nullptr);
  for (int tick = 0; tick < 3; ++tick) {
    for (int i = 0; i < 5; ++i) {
      EXPECT_TRUE(Remembers(*after, absl::StrCat("tick", tick, "-", i)))
          << "--fsync=interval lost a write acknowledged before the sync of "
             "interval "
          << tick;
    }
  }
  // At most one interval is lost; here, with no sync after them, the
  // model drops exactly that one (so the test can see a loss at all).
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(Remembers(*after, absl::StrCat("last-", i)));
  }
}

}  // namespace
}  // namespace exposure_filter
