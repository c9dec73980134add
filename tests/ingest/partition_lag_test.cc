// PartitionLagTracker: the lag definition of
// src/ingest/partition_lag.h, with made-up times (no Kafka, no clock).
#include "src/ingest/partition_lag.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

absl::Time At(int ms) { return kT0 + absl::Milliseconds(ms); }

TEST(PartitionLagTrackerTest, ReplayingUntilAWatermarkIsKnown) {
  PartitionLagTracker t(4, {1, 3});
  const PartitionLag w = t.Worst(At(0));
  EXPECT_TRUE(w.replaying);
  EXPECT_EQ(w.applied, -1);
  EXPECT_EQ(w.watermark, -1);
}

TEST(PartitionLagTrackerTest, AnEmptyPartitionIsCaughtUpWithNoLag) {
  PartitionLagTracker t(2, {0, 1});
  for (int32_t p : {0, 1}) {
    t.ObserveWatermark(p, 0, At(0));
    t.SetApplied(p, 0);  // the end of the partition, at offset 0
  }
  const PartitionLag w = t.Worst(At(5000));
  EXPECT_FALSE(w.replaying);
  EXPECT_EQ(w.lag, absl::ZeroDuration());
}

TEST(PartitionLagTrackerTest, ReplayEndsAtTheFirstWatermarkSeen) {
  PartitionLagTracker t(1, {0});
  t.SetApplied(0, 40);  // from the data_dir
  t.ObserveWatermark(0, 100, At(0));
  // More arrives while replaying: the replay still ends at 100.
  t.ObserveWatermark(0, 150, At(300));
  t.SetApplied(0, 99);
  EXPECT_TRUE(t.Worst(At(400)).replaying);
  // Offset 99 is the last message before the watermark 100: applied(0) =
  // 100 means it is applied.
  t.SetApplied(0, 100);
  const PartitionLag w = t.Worst(At(500));
  EXPECT_FALSE(w.replaying);
  // 100..149 known since 300 ms and not applied.
  EXPECT_EQ(w.lag, absl::Milliseconds(200));
  t.SetApplied(0, 150);
  EXPECT_EQ(t.Worst(At(600)).lag, absl::ZeroDuration());
}

TEST(PartitionLagTrackerTest, LagIsTheAgeOfTheOldestUnappliedWatermark) {
  PartitionLagTracker t(1, {0});
  t.SetApplied(0, 0);
  t.ObserveWatermark(0, 0, At(0));
  t.ObserveWatermark(0, 10, At(100));
  t.ObserveWatermark(0, 20, At(200));
  t.ObserveWatermark(0, 30, At(300));
  EXPECT_EQ(t.Worst(At(1000)).lag, absl::Milliseconds(900));
  t.SetApplied(0, 10);  // offsets 0..9: everything the first sample knew
  EXPECT_EQ(t.Worst(At(1000)).lag, absl::Milliseconds(800));
  t.SetApplied(0, 15);  // part of the next: it still waits since 200
  EXPECT_EQ(t.Worst(At(1000)).lag, absl::Milliseconds(800));
  t.SetApplied(0, 30);
  EXPECT_EQ(t.Worst(At(1000)).lag, absl::ZeroDuration());
}

TEST(PartitionLagTrackerTest, ASteadyStreamKeepsTheLagBounded) {
  // One sample per 100 ms, 10 messages each; the consumer applies each
  // batch 150 ms after its watermark was seen. It is never exactly at the
  // watermark, yet its lag stays at about one batch delay instead of growing
  // since the last time it was (the definition this one replaces).
  PartitionLagTracker t(1, {0});
  t.SetApplied(0, 0);
  t.ObserveWatermark(0, 0, At(0));
  absl::Duration worst = absl::ZeroDuration();
  for (int i = 1; i <= 100; ++i) {
    t.ObserveWatermark(0, 10 * i, At(100 * i));
    if (i >= 2) t.SetApplied(0, 10 * (i - 1));  // the batch of 50 ms ago...
    worst = std::max(worst, t.Worst(At(100 * i + 50)).lag);
  }
  EXPECT_GT(worst, absl::ZeroDuration());
  EXPECT_LE(worst, absl::Milliseconds(50));
}

TEST(PartitionLagTrackerTest, AStalledConsumerLagsFromTheFirstUnappliedSample) {
  PartitionLagTracker t(1, {0});
  t.SetApplied(0, 5);
  t.ObserveWatermark(0, 5, At(0));
  EXPECT_EQ(t.Worst(At(10000)).lag, absl::ZeroDuration());
  t.ObserveWatermark(0, 6, At(10000));  // a write arrives; nothing applies
  for (int ms = 10100; ms <= 12000; ms += 100) {
    t.ObserveWatermark(0, 6 + (ms - 10000) / 100, At(ms));
  }
  const PartitionLag w = t.Worst(At(12500));
  EXPECT_EQ(w.lag, absl::Milliseconds(2500));
  EXPECT_EQ(w.partition, 0);
  EXPECT_EQ(w.applied, 5);
  EXPECT_EQ(w.watermark, 26);
}

TEST(PartitionLagTrackerTest, CoalescedSamplesKeepTheOldestTime) {
  PartitionLagTracker t(1, {0});
  t.SetApplied(0, 0);
  t.ObserveWatermark(0, 0, At(0));
  const int n = PartitionLagTracker::kMaxSamples * 3;
  for (int i = 1; i <= n; ++i) t.ObserveWatermark(0, i, At(i));
  // Past the cap the newest samples merge into the last kept one: lag from
  // the first unapplied sample is exact, and after applying past the kept
  // ones it errs long (the merged sample's older time), never short.
  EXPECT_EQ(t.Worst(At(n)).lag, absl::Milliseconds(n - 1));
  t.SetApplied(0, n - 1);
  const absl::Duration lag = t.Worst(At(n)).lag;
  EXPECT_GE(lag, absl::Milliseconds(1));
  t.SetApplied(0, n);
  EXPECT_EQ(t.Worst(At(n)).lag, absl::ZeroDuration());
}

TEST(PartitionLagTrackerTest, WorstPrefersReplayingThenTheLargestLag) {
  PartitionLagTracker t(8, {2, 5, 7});
  for (int32_t p : {2, 5, 7}) {
    t.SetApplied(p, 10);
    t.ObserveWatermark(p, 10, At(0));
  }
  t.ObserveWatermark(5, 12, At(100));
  t.ObserveWatermark(7, 11, At(300));
  PartitionLag w = t.Worst(At(1000));
  EXPECT_EQ(w.partition, 5);
  EXPECT_EQ(w.lag, absl::Milliseconds(900));
  EXPECT_FALSE(w.replaying);
}

TEST(PartitionLagTrackerTest, AppliedOnlyMovesForwardAndOnlyForOwned) {
  PartitionLagTracker t(6, {1, 4});
  t.SetApplied(1, 30);
  t.SetApplied(1, 20);  // a stale report
  EXPECT_EQ(t.Applied(1), 30);
  EXPECT_EQ(t.Applied(4), -1);  // owned, unknown
  t.SetApplied(2, 5);
  EXPECT_EQ(t.Applied(2), -1);  // not owned
  EXPECT_FALSE(t.Owns(2));
  EXPECT_FALSE(t.Owns(-1));
  EXPECT_FALSE(t.Owns(6));
  EXPECT_TRUE(t.Owns(4));
}

// The consumer thread applies, the monitor samples, readers read, all at
// once (run under TSan in CI): the applied offsets only grow, and the end
// state is exact.
// A caught-up copy cut off from the brokers: its watermark stops moving,
// so the sample lag stays 0, but past the bound without word from the
// brokers it is unreachable and lags at least the time since it last heard.
TEST(PartitionLagTrackerTest, UnheardPastTheBoundIsLaggingNotCaughtUp) {
  PartitionLagTracker t(2, {0, 1});
  t.SetUnreachableAfter(absl::Seconds(1));
  for (int32_t p : {0, 1}) {
    t.ObserveWatermark(p, 10, At(0));
    t.SetApplied(p, 10);
  }
  // Partition 1's broker keeps answering; partition 0's does not.
  t.ObserveReachable(1, At(900));
  t.ObserveReachable(1, At(1800));
  PartitionLag w = t.Worst(At(1000));
  EXPECT_FALSE(w.unreachable);
  EXPECT_EQ(w.lag, absl::ZeroDuration());
  w = t.Worst(At(1900));
  EXPECT_EQ(w.partition, 0);
  EXPECT_TRUE(w.unreachable);
  EXPECT_EQ(w.lag, absl::Milliseconds(1900));
  // The cached watermark read again, unchanged, proves nothing.
  t.ObserveWatermark(0, 10, At(2000));
  EXPECT_TRUE(t.Worst(At(2100)).unreachable);
  // A probe that answers: caught up again, lag 0.
  t.ObserveReachable(0, At(2200));
  t.ObserveReachable(1, At(2200));
  w = t.Worst(At(2300));
  EXPECT_FALSE(w.unreachable);
  EXPECT_EQ(w.lag, absl::ZeroDuration());
}

// A watermark that moved came with a fetch response: the brokers were
// reachable then, and a real lag larger than the silence is kept.
TEST(PartitionLagTrackerTest,
     AMovingWatermarkCountsAsHeardAndTheLargerLagWins) {
  PartitionLagTracker t(1, {0});
  t.SetUnreachableAfter(absl::Seconds(1));
  t.SetApplied(0, 0);
  t.ObserveWatermark(0, 0, At(0));
  t.ObserveWatermark(0, 5, At(500));  // 0..4 known, not applied
  t.ObserveWatermark(0, 9, At(1200));
  PartitionLag w = t.Worst(At(2000));
  EXPECT_FALSE(w.unreachable);  // heard at 1200
  EXPECT_EQ(w.lag, absl::Milliseconds(1500));
  w = t.Worst(At(2500));
  EXPECT_TRUE(w.unreachable);
  EXPECT_EQ(w.lag, absl::Milliseconds(2000));  // samples' lag, the larger
}

TEST(PartitionLagTrackerTest, WithoutABoundSilenceIsNotLag) {
  PartitionLagTracker t(1, {0});
  t.ObserveWatermark(0, 3, At(0));
  t.SetApplied(0, 3);
  const PartitionLag w = t.Worst(At(600000));
  EXPECT_FALSE(w.unreachable);
  EXPECT_EQ(w.lag, absl::ZeroDuration());
}

TEST(PartitionLagTrackerTest, ConcurrentUseEndsCaughtUp) {
  PartitionLagTracker t(4, {0, 1, 2, 3});
  constexpr int kSteps = 2000;
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    for (int i = 0; i <= kSteps; ++i) {
      for (int32_t p = 0; p < 4; ++p) t.ObserveWatermark(p, i, At(i));
    }
  });
  std::thread reader([&] {
    int64_t last = -1;
    while (!done.load()) {
      const int64_t a = t.Applied(2);
      EXPECT_GE(a, last);
      last = a;
      (void)t.Worst(At(kSteps));
    }
  });
  for (int i = 0; i <= kSteps; ++i) {
    for (int32_t p = 0; p < 4; ++p) t.SetApplied(p, i);
  }
  sampler.join();
  done.store(true);
  reader.join();
  const PartitionLag w = t.Worst(At(kSteps + 1));
  EXPECT_FALSE(w.replaying);
  EXPECT_EQ(w.lag, absl::ZeroDuration());
  EXPECT_EQ(t.Applied(3), kSteps);
}

}  // namespace
}  // namespace exposure_filter
