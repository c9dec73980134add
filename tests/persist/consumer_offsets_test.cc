// Kafka consumer offsets are durable with the data: the optional
// log record, the snapshot metadata entry, recovery that merges them, and
// the snapshot cut that never stores offsets ahead of the data it covers.
#include <string>

#include "gtest/gtest.h"
#include "src/persist/consumer_offsets_record.h"
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

ConsumerOffsets Offsets(const std::string& topic,
                        std::initializer_list<std::pair<int32_t, int64_t>> kv) {
  ConsumerOffsets o;
  o.topic = topic;
  for (const auto& [p, n] : kv) o.next_offset[p] = n;
  return o;
}

TEST(ConsumerOffsetsRecordTest, RoundTrips) {
  const ConsumerOffsets o = Offsets("exposures", {{0, 5}, {7, 1234567890123}});
  std::string body;
  EncodeConsumerOffsets(o, &body);
  ConsumerOffsets back;
  ASSERT_TRUE(DecodeConsumerOffsets(body, &back).ok());
  EXPECT_EQ(back, o);
}

TEST(ConsumerOffsetsRecordTest, RejectsTruncatedAndTrailingBytes) {
  std::string body;
  EncodeConsumerOffsets(Offsets("t", {{1, 2}}), &body);
  ConsumerOffsets back;
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeConsumerOffsets(body.substr(0, body.size() - 1), &back)));
  EXPECT_TRUE(absl::IsDataLoss(DecodeConsumerOffsets(body + "x", &back)));
}

TEST(ConsumerOffsetsRecordTest, MergeAdvancesAndAnotherTopicReplaces) {
  ConsumerOffsets o = Offsets("a", {{0, 5}, {1, 6}});
  o.Merge(Offsets("a", {{1, 9}, {2, 1}}));
  EXPECT_EQ(o, Offsets("a", {{0, 5}, {1, 9}, {2, 1}}));
  o.Merge(Offsets("b", {{3, 3}}));
  EXPECT_EQ(o, Offsets("b", {{3, 3}}));
}

class ConsumerOffsetsDurabilityTest : public ::testing::Test {
 protected:
  struct Life {
    StoreUnderTest s;
    std::unique_ptr<StoreDurability> d;
    RecoveryReport report;
  };
  std::unique_ptr<Life> Boot() {
    auto life =
        std::make_unique<Life>(Life{StoreUnderTest(&clock_), nullptr, {}});
    DurabilityOptions o;
    o.data_dir = tmp_.path() + "/data";
    o.fsync = FsyncPolicy::kAlways;
    o.snapshot_interval = absl::ZeroDuration();
    o.snapshot_wal_bytes = 0;
    auto d =
        StoreDurability::Open(o, life->s.surfaces.get(), life->s.store.get());
    EXPECT_TRUE(d.ok()) << d.status();
    life->d = *std::move(d);
    auto report = life->d->Recover();
    EXPECT_TRUE(report.ok()) << report.status();
    life->report = *std::move(report);
    return life;
  }
  // A consumer batch: its exposures, then its offsets, one commit.
  void Batch(Life& l, const std::string& user, uint64_t first,
             const ConsumerOffsets& advanced) {
    RecordOne(*l.s.store, l.s.surface("home"), user, IdHashes(first, 3));
    l.d->LogConsumerOffsets(advanced);
    ASSERT_TRUE(l.d->Commit().ok());
  }

  TempDir tmp_;
  ManualClock clock_{kStartMs};
};

TEST_F(ConsumerOffsetsDurabilityTest, NoneWhenNeverLogged) {
  auto l = Boot();
  EXPECT_TRUE(l->report.consumer_offsets.topic.empty());
  EXPECT_TRUE(l->d->consumer_offsets().next_offset.empty());
}

TEST_F(ConsumerOffsetsDurabilityTest, LogRecordsSurviveACrash) {
  {
    auto l = Boot();
    Batch(*l, "u1", 100, Offsets("ex", {{0, 10}, {3, 4}}));
    Batch(*l, "u2", 200, Offsets("ex", {{0, 17}}));
    // No final snapshot: like a crash after the commits (fsync=always).
    ASSERT_TRUE(l->d->Close(/*final_snapshot=*/false).ok());
  }
  auto l = Boot();
  EXPECT_EQ(l->report.consumer_offsets, Offsets("ex", {{0, 17}, {3, 4}}));
  EXPECT_EQ(l->d->consumer_offsets(), Offsets("ex", {{0, 17}, {3, 4}}));
  EXPECT_EQ(CountRemoved(KeepMask(*l->s.store, l->s.surface("home"), "u2",
                                  IdHashes(200, 3))),
            3);
}

TEST_F(ConsumerOffsetsDurabilityTest,
       SnapshotCarriesThemAndTheLogAfterAdvances) {
  {
    auto l = Boot();
    Batch(*l, "u1", 100, Offsets("ex", {{0, 10}, {1, 20}}));
    ASSERT_TRUE(l->d->Snapshot().ok());
    Batch(*l, "u1", 300, Offsets("ex", {{1, 25}}));
    ASSERT_TRUE(l->d->Close(/*final_snapshot=*/false).ok());
  }
  auto l = Boot();
  EXPECT_GT(l->report.snapshot_seq, 0u);
  EXPECT_EQ(l->report.consumer_offsets, Offsets("ex", {{0, 10}, {1, 25}}));
}

TEST_F(ConsumerOffsetsDurabilityTest, FinalSnapshotAloneRestoresThem) {
  {
    auto l = Boot();
    Batch(*l, "u1", 100, Offsets("ex", {{2, 99}}));
    ASSERT_TRUE(l->d->Close(/*final_snapshot=*/true).ok());
  }
  auto l = Boot();
  EXPECT_EQ(l->report.wal_records, 0u);  // all from the snapshot
  EXPECT_EQ(l->report.consumer_offsets, Offsets("ex", {{2, 99}}));
  // And the next snapshot keeps them though nothing new was logged.
  ASSERT_TRUE(l->d->Close(/*final_snapshot=*/true).ok());
  l.reset();  // releases the data dir's lock
  auto again = Boot();
  EXPECT_EQ(again->report.consumer_offsets, Offsets("ex", {{2, 99}}));
}

}  // namespace
}  // namespace exposure_filter
