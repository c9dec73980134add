// Many writers on a durable store at once, with commits, snapshots (log
// rotations) and interval fsyncs running concurrently: afterwards every
// committed write is recovered. Under -DEF_SANITIZE=thread this is the data
// race test of the log, the journal hook and the snapshot writer.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/persist/store_durability.h"
#include "tests/persist/persist_test_util.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using testing_util::CountRemoved;
using testing_util::IdHashes;
using testing_util::KeepMask;
using testing_util::kStartMs;
using testing_util::RecordOne;
using testing_util::StoreUnderTest;
using testing_util::TempDir;

constexpr int kWriters = 6;
constexpr int kBatches = 150;
constexpr int kBatch = 8;
constexpr int kUsers = 5;  // fewer than writers: users are shared

std::string User(int u) { return "user-" + std::to_string(u); }
uint64_t FirstId(int w, int b) {
  return (uint64_t{1} << 40) * (w + 1) + uint64_t{kBatch} * b;
}

TEST(PersistConcurrencyTest, CommittedWritesSurviveConcurrentSnapshots) {
  TempDir tmp;
  ManualClock clock(kStartMs);
  DurabilityOptions o;
  o.data_dir = tmp.path() + "/data";
  o.fsync = FsyncPolicy::kInterval;
  o.fsync_interval = absl::Milliseconds(5);
  o.snapshot_interval = absl::ZeroDuration();
  o.snapshot_wal_bytes = 0;
  {
    StoreUnderTest s(&clock, /*shards=*/2);
    auto d = StoreDurability::Open(o, s.surfaces.get(), s.store.get());
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_TRUE((*d)->Recover().ok());
    const Surface& home = s.surface("home");
    std::atomic<int> failures{0};
    std::atomic<bool> done{false};
    // The writers start once the first snapshot has, and the snapshotter
    // takes at least one: `snapshots_written > 0` holds on a machine of any
    // speed (a scheduler that ran every writer before the snapshotter's
    // first call left it at 0).
    absl::Notification snapshotting;
    std::thread snapshotter([&] {
      do {
        if (!snapshotting.HasBeenNotified()) snapshotting.Notify();
        if (!(*d)->Snapshot().ok()) failures.fetch_add(1);
      } while (!done.load());
    });
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        snapshotting.WaitForNotification();
        for (int b = 0; b < kBatches; ++b) {
          const std::string user = User((w + b) % kUsers);
          RecordOne(*s.store, home, user, IdHashes(FirstId(w, b), kBatch));
          if (b % 10 == 9) s.store->DeleteUser(home, "churn");
          RecordOne(*s.store, home, "churn", IdHashes(FirstId(w, b), 1));
          if (!(*d)->Commit().ok()) failures.fetch_add(1);
        }
      });
    }
    for (std::thread& t : writers) t.join();
    done.store(true);
    snapshotter.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_GT((*d)->stats().snapshots_written, 0u);
    // Dies here without a final snapshot, like kill -9 after the commits.
  }
  StoreUnderTest s(&clock, /*shards=*/8);
  auto d = StoreDurability::Open(o, s.surfaces.get(), s.store.get());
  ASSERT_TRUE(d.ok()) << d.status();
  auto report = (*d)->Recover();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->corrupt) << report->corruption;
  const Surface& home = s.surface("home");
  int missing = 0;
  for (int w = 0; w < kWriters; ++w) {
    for (int b = 0; b < kBatches; ++b) {
      missing +=
          kBatch - CountRemoved(KeepMask(*s.store, home, User((w + b) % kUsers),
                                         IdHashes(FirstId(w, b), kBatch)));
    }
  }
  EXPECT_EQ(missing, 0);
}

}  // namespace
}  // namespace exposure_filter
