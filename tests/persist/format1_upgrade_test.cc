// Upgrade: a data directory written by the previous release's
// server -- format-1 snapshot user records and a write-ahead log tail --
// loads with every user kept and the same answers. The directory is
// tests/testdata/format1_datadir/, made by that release's own binary with
// tools/golden/make_format1_datadir.py (the command is in its docstring);
// manifest.tsv holds every user's recorded items and fresh candidates with
// the old server's FilterRecalled answers.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "exposure_filter/item_hash.h"
#include "gtest/gtest.h"
#include "src/persist/record_frame.h"
#include "src/persist/snapshot.h"
#include "src/persist/store_durability.h"
#include "tests/persist/persist_test_util.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using testing_util::KeepMask;
using testing_util::ReadFile;
using testing_util::StoreUnderTest;
using testing_util::TempDir;

const std::string kFixture = std::string(EF_TESTDATA_DIR) + "/format1_datadir";

struct Row {
  bool is_key = false;
  std::string item;
  bool recorded = false;
  bool old_claimed = false;
};
struct Manifest {
  int64_t generated_at_ms = 0;
  // (surface, user) -> phases (1 snapshot, 2 log, 3 both) and rows.
  std::map<std::pair<std::string, std::string>,
           std::pair<int, std::vector<Row>>>
      users;
};

Manifest ReadManifest() {
  Manifest m;
  std::ifstream in(kFixture + "/manifest.tsv");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() == 2 && f[0] == "# generated_at_ms") {
      EXPECT_TRUE(absl::SimpleAtoi(f[1], &m.generated_at_ms));
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    EXPECT_EQ(f.size(), 7u) << line;
    if (f.size() != 7) continue;
    auto& user = m.users[{f[0], f[1]}];
    EXPECT_TRUE(absl::SimpleAtoi(f[2], &user.first)) << line;
    user.second.push_back({f[3] == "key", f[4], f[5] == "1", f[6] == "1"});
  }
  return m;
}

uint64_t HashOf(const Row& r) {
  if (r.is_key) return HashItemKey(r.item);
  uint64_t id = 0;
  EXPECT_TRUE(absl::SimpleAtoi(r.item, &id)) << r.item;
  return HashItemId(id);
}

class Format1UpgradeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    manifest_ = ReadManifest();
    ASSERT_GT(manifest_.generated_at_ms, 0);
    ASSERT_EQ(manifest_.users.size(), 10u);
    // Recovery writes into the directory (a new log segment): work on a
    // copy, as an operator's upgraded server would on its own data_dir.
    std::filesystem::copy(kFixture + "/data", dir());
    // One minute after the old server answered: nothing has aged out.
    clock_.Set(manifest_.generated_at_ms + 60'000);
  }

  struct Life {
    StoreUnderTest s;
    std::unique_ptr<StoreDurability> d;
    RecoveryReport report;
  };
  std::unique_ptr<Life> Boot() {
    auto life = std::make_unique<Life>(Life{StoreUnderTest(&clock_), {}, {}});
    DurabilityOptions o;
    o.data_dir = dir();
    o.fsync = FsyncPolicy::kAlways;
    o.snapshot_interval = absl::ZeroDuration();
    o.snapshot_wal_bytes = 0;
    o.strict_recovery = true;  // a record it cannot read is an error
    auto d =
        StoreDurability::Open(o, life->s.surfaces.get(), life->s.store.get());
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return nullptr;
    life->d = *std::move(d);
    auto report = life->d->Recover();
    EXPECT_TRUE(report.ok()) << report.status();
    if (!report.ok()) return nullptr;
    life->report = *std::move(report);
    return life;
  }

  // Checks every manifest row against the store; returns rows checked.
  int CheckAnswers(Life& l) {
    int checked = 0;
    for (const auto& [who, user] : manifest_.users) {
      const auto& [surface, user_id] = who;
      std::vector<uint64_t> hashes;
      for (const Row& r : user.second) hashes.push_back(HashOf(r));
      const std::vector<uint8_t> keep =
          KeepMask(*l.s.store, l.s.surface(surface), user_id, hashes);
      const bool snapshot_only = user.first == 1;
      for (size_t i = 0; i < hashes.size(); ++i) {
        const Row& r = user.second[i];
        const bool claimed = keep[i] == 0;
        if (r.recorded) {
          EXPECT_TRUE(claimed)
              << "false negative after the upgrade: " << surface << "/"
              << user_id << " " << r.item;
        }
        // Users held only in format-1 snapshot records keep their Bloom
        // bits as they were: the very same answers, false positives too.
        // (Log-replayed items are re-recorded by this build's filter.)
        if (snapshot_only) {
          EXPECT_EQ(claimed, r.old_claimed)
              << surface << "/" << user_id << " " << r.item;
        }
        ++checked;
      }
    }
    return checked;
  }

  std::string dir() const { return tmp_.path() + "/data"; }
  TempDir tmp_;
  ManualClock clock_{0};
  Manifest manifest_;
};

// The fixture really is the previous release's: its snapshot holds
// version-1 user records only.
TEST_F(Format1UpgradeTest, FixtureSnapshotHoldsFormat1UserRecords) {
  int v1 = 0, v2 = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(kFixture + "/data")) {
    if (e.path().extension() != ".efs") continue;
    const std::string data = ReadFile(e.path().string());
    size_t offset = kFileHeaderBytes;
    Frame frame;
    while (ParseFrame(absl::string_view(data).substr(offset), &frame) ==
           FrameParse::kOk) {
      v1 += frame.type == kSnapshotUser;
      v2 += frame.type == kSnapshotUserParts;
      offset += frame.size;
    }
  }
  EXPECT_EQ(v1, 8);  // the 8 users of phase 1
  EXPECT_EQ(v2, 0);
}

TEST_F(Format1UpgradeTest, EveryUserIsKeptWithTheSameAnswers) {
  std::unique_ptr<Life> l = Boot();
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->report.users_loaded, 8u);
  EXPECT_EQ(l->report.expired_users, 0u);
  EXPECT_GT(l->report.wal_records, 0u);
  EXPECT_FALSE(l->report.corrupt) << l->report.corruption;
  for (const auto& [who, user] : manifest_.users) {
    EXPECT_TRUE(l->s.store->GetUserStats(l->s.surface(who.first), who.second)
                    .has_value())
        << who.first << "/" << who.second << " lost in the upgrade";
  }
  EXPECT_GT(CheckAnswers(*l), 9000);
}

// After the upgrade the server snapshots in the new record version; that
// snapshot loads again with the same answers.
TEST_F(Format1UpgradeTest, TheUpgradedStoreSnapshotsAndReloads) {
  {
    std::unique_ptr<Life> l = Boot();
    ASSERT_NE(l, nullptr);
    ASSERT_TRUE(l->d->Close(/*final_snapshot=*/true).ok());
  }
  std::unique_ptr<Life> again = Boot();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->report.users_loaded, manifest_.users.size());
  EXPECT_EQ(again->report.wal_records, 0u);
  EXPECT_GT(CheckAnswers(*again), 9000);
}

}  // namespace
}  // namespace exposure_filter
