// Snapshots: a store written and loaded back holds the same filters, which
// keep growing exactly as the originals; damage anywhere is detected.
#include "src/persist/snapshot.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/persist/data_dir.h"
#include "src/persist/posix_file.h"
#include "tests/persist/persist_test_util.h"
#include "tests/store/store_test_util.h"

namespace exposure_filter {
namespace {

using ::testing::HasSubstr;
using testing_util::IdHashes;
using testing_util::KeepMask;
using testing_util::kStartMs;
using testing_util::ReadFile;
using testing_util::RecordOne;
using testing_util::StoreUnderTest;
using testing_util::TempDir;

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = DataDir::Open(tmp_.path() + "/data");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
    // Users of every size: one block, grown segments, several slices.
    for (int u = 0; u < 30; ++u) {
      const std::string user = "user-" + std::to_string(u);
      RecordOne(*original_.store, original_.surface("home"), user,
                IdHashes(u * 100000, 1 + u * u * 5), kStartMs - 86'400'000);
      RecordOne(*original_.store, original_.surface("video"), user,
                IdHashes(u * 100000 + 50000, 3 + u));
    }
  }

  std::string Write(uint64_t seq, const SnapshotMetadata& metadata = {}) {
    auto written = WriteSnapshot(*dir_, seq, *original_.store, metadata);
    EXPECT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(written->users, 60u);
    return ReadFile(dir_->SnapshotPath(seq));
  }

  // The portable encoding of every user, the strictest comparison there is:
  // bits, counts, geometry and slices.
  std::vector<std::string> Filters(StoreUnderTest& s) {
    std::vector<std::string> out;
    for (const char* surface : {"home", "video"}) {
      const Surface& sf = s.surface(surface);
      for (int u = 0; u < 30; ++u) {
        out.push_back(
            s.store->GetFilter(&sf, sf.policy, "user-" + std::to_string(u), "")
                .bytes);
      }
    }
    return out;
  }

  TempDir tmp_;
  std::unique_ptr<DataDir> dir_;
  ManualClock clock_{kStartMs};
  StoreUnderTest original_{&clock_};
};

TEST_F(SnapshotTest, LoadedStoreHoldsTheSameFilters) {
  const std::string data = Write(5, {{"kafka.offsets", "p0=17"}});
  StoreUnderTest restored(&clock_, /*shards=*/16);
  auto load =
      LoadSnapshot(data, 5, restored.surfaces.get(), restored.store.get());
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->users, 60u);
  EXPECT_EQ(load->expired_users, 0u);
  ASSERT_EQ(load->metadata.size(), 1u);
  EXPECT_EQ(load->metadata[0].first, "kafka.offsets");
  EXPECT_EQ(load->metadata[0].second, "p0=17");
  EXPECT_EQ(Filters(restored), Filters(original_));
  EXPECT_EQ(restored.store->Usage(2).users, 60u);
}

TEST_F(SnapshotTest, RestoredFiltersKeepGrowingLikeTheOriginals) {
  const std::string data = Write(1);
  StoreUnderTest restored(&clock_);
  ASSERT_TRUE(
      LoadSnapshot(data, 1, restored.surfaces.get(), restored.store.get())
          .ok());
  // Enough new items to fill segments and open new ones in both.
  for (StoreUnderTest* s : {&original_, &restored}) {
    for (int u = 0; u < 30; ++u) {
      RecordOne(*s->store, s->surface("home"), "user-" + std::to_string(u),
                IdHashes(9'000'000 + u * 1000, 400));
    }
  }
  EXPECT_EQ(Filters(restored), Filters(original_));
}

TEST_F(SnapshotTest, SlicesThatAgedOutWhileDownAreDropped) {
  const std::string data = Write(1);
  // 31 days later the "home" writes of a day before the snapshot are past
  // the 30-day window (plus up to one 5-day slice); "video" ones too.
  clock_.Advance(absl::Hours(24 * 37));
  StoreUnderTest restored(&clock_);
  auto load =
      LoadSnapshot(data, 1, restored.surfaces.get(), restored.store.get());
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load->users, 0u);
  EXPECT_EQ(load->expired_users, 60u);
  EXPECT_EQ(restored.store->Usage(2).users, 0u);
}

TEST_F(SnapshotTest, EveryTruncationIsDetected) {
  const std::string data = Write(1);
  // Every cut point would take minutes over the whole file; every byte of
  // the header and the End record, and a stride through the middle.
  std::vector<size_t> cuts;
  for (size_t i = 0; i < 64; ++i) cuts.push_back(i);
  for (size_t i = 64; i < data.size() - 64; i += 97) cuts.push_back(i);
  for (size_t i = data.size() - 64; i < data.size(); ++i) cuts.push_back(i);
  // One registry for all (building a policy's sizing tables is not free).
  StoreUnderTest restored(&clock_);
  for (size_t cut : cuts) {
    restored.store->Clear();
    auto load = LoadSnapshot(absl::string_view(data).substr(0, cut), 1,
                             restored.surfaces.get(), restored.store.get());
    EXPECT_TRUE(absl::IsDataLoss(load.status())) << "cut at " << cut;
  }
}

TEST_F(SnapshotTest, BitFlipsAnywhereAreDetected) {
  const std::string data = Write(1);
  StoreUnderTest restored(&clock_);
  for (size_t byte = 0; byte < data.size(); byte += 31) {
    std::string bad = data;
    bad[byte] = static_cast<char>(bad[byte] ^ 0x04);
    restored.store->Clear();
    auto load =
        LoadSnapshot(bad, 1, restored.surfaces.get(), restored.store.get());
    EXPECT_TRUE(absl::IsDataLoss(load.status())) << "byte " << byte;
  }
}

TEST_F(SnapshotTest, TrailingBytesAndWrongNumberAreDetected) {
  const std::string data = Write(3);
  StoreUnderTest a(&clock_), b(&clock_);
  EXPECT_THAT(
      std::string(LoadSnapshot(data + "x", 3, a.surfaces.get(), a.store.get())
                      .status()
                      .message()),
      HasSubstr("after the End record"));
  EXPECT_TRUE(absl::IsDataLoss(
      LoadSnapshot(data, 4, b.surfaces.get(), b.store.get()).status()));
}

TEST_F(SnapshotTest, AChangedSliceSpanIsRefusedNotMisread) {
  const std::string data = Write(1);
  FilterPolicyOptions other;
  other.slice_span = absl::Hours(24);
  other.retention = absl::Hours(24 * 6);
  StoreUnderTest restored(&clock_, 4, other);
  auto load =
      LoadSnapshot(data, 1, restored.surfaces.get(), restored.store.get());
  EXPECT_TRUE(absl::IsFailedPrecondition(load.status())) << load.status();
  EXPECT_THAT(std::string(load.status().message()), HasSubstr("slice_span"));
}

TEST_F(SnapshotTest, AtomicWriteLeavesNoTempFile) {
  Write(2);
  auto names = ListFiles(dir_->path());
  ASSERT_TRUE(names.ok());
  for (const std::string& n : *names)
    EXPECT_THAT(n, ::testing::Not(HasSubstr(".tmp")));
}

}  // namespace
}  // namespace exposure_filter
