#include "src/ingest/partition_lag.h"

#include <algorithm>

namespace exposure_filter {
namespace {

constexpr int64_t kNotOwned = -2;

}  // namespace

PartitionLagTracker::PartitionLagTracker(int32_t partition_count,
                                         const std::vector<int32_t>& partitions)
    : partition_count_(partition_count),
      partitions_([&] {
        std::vector<int32_t> p = partitions;
        std::sort(p.begin(), p.end());
        return p;
      }()),
      applied_(new std::atomic<int64_t>[std::max(partition_count, 1)]),
      states_(partitions_.size()) {
  for (int32_t p = 0; p < partition_count_; ++p) {
    applied_[p].store(kNotOwned, std::memory_order_relaxed);
  }
  for (int32_t p : partitions_) applied_[p].store(-1);
}

bool PartitionLagTracker::Owns(int32_t partition) const {
  return partition >= 0 && partition < partition_count_ &&
         applied_[partition].load(std::memory_order_acquire) != kNotOwned;
}

int64_t PartitionLagTracker::Applied(int32_t partition) const {
  if (!Owns(partition)) return -1;
  return applied_[partition].load(std::memory_order_acquire);
}

void PartitionLagTracker::Trim(State* st, int64_t applied) {
  while (!st->samples.empty() && st->samples.front().high <= applied) {
    st->samples.pop_front();
  }
  if (st->first_watermark >= 0 && applied >= st->first_watermark) {
    st->caught_up = true;
  }
}

void PartitionLagTracker::SetApplied(int32_t partition, int64_t next_offset) {
  if (!Owns(partition) || next_offset < 0) return;
  std::atomic<int64_t>& a = applied_[partition];
  int64_t cur = a.load(std::memory_order_relaxed);
  while (cur < next_offset &&
         !a.compare_exchange_weak(cur, next_offset, std::memory_order_release,
                                  std::memory_order_relaxed)) {
  }
  const size_t i = IndexOf(partition);
  MutexLock lock(&mu_);
  Trim(&states_[i], a.load(std::memory_order_relaxed));
}

size_t PartitionLagTracker::IndexOf(int32_t partition) const {
  return std::lower_bound(partitions_.begin(), partitions_.end(), partition) -
         partitions_.begin();
}

void PartitionLagTracker::ObserveReachable(int32_t partition, absl::Time now) {
  if (!Owns(partition)) return;
  const size_t i = IndexOf(partition);
  MutexLock lock(&mu_);
  State& st = states_[i];
  st.heard = std::max(st.heard, now);
}

void PartitionLagTracker::SetUnreachableAfter(absl::Duration bound) {
  MutexLock lock(&mu_);
  unreachable_after_ = bound;
}

void PartitionLagTracker::ObserveWatermark(int32_t partition, int64_t high,
                                           absl::Time now) {
  if (!Owns(partition) || high < 0) return;
  const size_t i = IndexOf(partition);
  MutexLock lock(&mu_);
  State& st = states_[i];
  // The first watermark, or one that moved, came with a fetch response
  // since the last sample: the brokers were reachable. (An unchanged one
  // is librdkafka's cached copy and proves nothing.)
  if (st.first_watermark < 0 || high > st.newest_watermark) {
    st.heard = std::max(st.heard, now);
  }
  if (st.first_watermark < 0) st.first_watermark = high;
  // A watermark that did not grow says nothing new: the sample already
  // held keeps the earlier time, which is when the data was first known.
  if (high > st.newest_watermark) {
    st.newest_watermark = high;
    if (!st.samples.empty() && st.samples.size() >= kMaxSamples) {
      st.samples.back().high = high;  // merged: older time, newer watermark
    } else {
      st.samples.push_back(Sample{now, high});
    }
  }
  Trim(&st, applied_[partition].load(std::memory_order_acquire));
}

PartitionLag PartitionLagTracker::Compute(int32_t partition, const State& st,
                                          absl::Time now) const {
  PartitionLag out;
  out.partition = partition;
  out.applied = applied_[partition].load(std::memory_order_acquire);
  out.watermark = st.newest_watermark;
  out.replaying = !st.caught_up;
  // Trim() ran at every change of the samples or the applied offset, so the
  // front is the oldest sample not applied. (Between SetApplied's store and
  // its Trim a reader may still see a covered front: a lag too high for an
  // instant, never too low.)
  out.lag = st.samples.empty()
                ? absl::ZeroDuration()
                : std::max(absl::ZeroDuration(), now - st.samples.front().time);
  if (unreachable_after_ > absl::ZeroDuration() &&
      st.heard != absl::InfinitePast() && now - st.heard > unreachable_after_) {
    out.unreachable = true;
    out.lag = std::max(out.lag, now - st.heard);
  }
  return out;
}

std::vector<PartitionLag> PartitionLagTracker::All(absl::Time now) const {
  std::vector<PartitionLag> out;
  out.reserve(partitions_.size());
  MutexLock lock(&mu_);
  for (size_t i = 0; i < partitions_.size(); ++i) {
    out.push_back(Compute(partitions_[i], states_[i], now));
  }
  return out;
}

PartitionLag PartitionLagTracker::Worst(absl::Time now) const {
  PartitionLag worst;
  worst.partition = -1;
  worst.replaying = false;
  worst.lag = absl::ZeroDuration();
  for (const PartitionLag& p : All(now)) {
    if (worst.partition < 0) {
      worst = p;
      continue;
    }
    // Replaying outranks any lag: such a copy must not serve at all.
    if (p.replaying != worst.replaying) {
      if (p.replaying) worst = p;
      continue;
    }
    if (p.lag > worst.lag) worst = p;
  }
  return worst;
}

}  // namespace exposure_filter
