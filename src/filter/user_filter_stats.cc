// UserFilter's statistics: the union bound F over the live slices (runs and
// legacy Bloom slices) and the per-slice figures Stats reports.
#include <algorithm>
#include <limits>
#include <vector>

#include "src/filter/user_filter.h"
#include "src/filter/user_filter_internal.h"

namespace exposure_filter {

namespace {

// P(a fresh item passes every segment of a legacy slice), each segment at
// its expected rate for its count (bloom_math.h), the rate format 1 reports.
double LegacySliceClean(const BloomSlices::Slice& s) {
  double clean = 1.0;
  for (const BloomSlices::Segment& seg : s.segments) {
    clean *= 1.0 - seg.EstimatedFpRate();
  }
  return clean;
}

}  // namespace

namespace user_filter_internal {

// The legacy slices' FP rate: 1 - P(a fresh item passes all of them).
double LegacyFpRate(const BloomSlices& b) {
  double clean = 1.0;
  for (const BloomSlices::Slice& s : b.slices()) clean *= LegacySliceClean(s);
  return 1.0 - clean;
}

}  // namespace user_filter_internal

double UserFilter::FpBound(const FilterPolicy& policy, int64_t now_ms) const {
  return Stats(policy, now_ms).estimated_fp_rate;
}

UserFilterStats UserFilter::Stats(const FilterPolicy& policy,
                                  int64_t now_ms) const {
  UserFilterStats st;
  st.bytes = MemoryBytes();
  if (h_ == nullptr) return st;
  const Tables t = Decode();
  struct Row {
    int64_t index;
    SliceStats s;
    int64_t min_ms, max_ms;
  };
  std::vector<Row> rows;
  auto row = [&](int64_t index) -> Row& {
    for (Row& r : rows) {
      if (r.index == index) return r;
    }
    Row r{index,
          {},
          std::numeric_limits<int64_t>::max(),
          std::numeric_limits<int64_t>::min()};
    r.s.start_ms = policy.SliceStartMs(index);
    r.s.end_ms = policy.SliceEndMs(index);
    rows.push_back(r);
    return rows.back();
  };
  double legacy_clean = 1.0;
  double runs_fp = 0;
  if (t.legacy != nullptr) {
    for (const BloomSlices::Slice& s : t.legacy->slices.slices()) {
      if (!policy.SliceLive(s.index, now_ms)) continue;
      Row& r = row(s.index);
      const double clean = LegacySliceClean(s);
      legacy_clean *= clean;
      r.s.estimated_fp_rate += 1.0 - clean;
      for (const BloomSlices::Segment& seg : s.segments) {
        r.s.items += seg.count();
        r.s.capacity += seg.capacity();
        r.s.bytes += seg.bit_bytes();
        ++r.s.segments;
      }
      r.min_ms = std::min(r.min_ms, s.min_event_ms);
      r.max_ms = std::max(r.max_ms, s.max_event_ms);
    }
  }
  size_t k = 0;
  for (const SliceMeta& s : t.slices) {
    const bool live = policy.SliceLive(s.index, now_ms);
    for (int j = 0; j < s.num_runs; ++j, ++k) {
      if (!live) continue;
      const RunMeta& run = t.runs[k];
      Row& r = row(s.index);
      r.s.items += run.count;
      // A tail's items are within its main run's capacity.
      if (!run.tail) r.s.capacity += run.capacity;
      r.s.bytes += (run.payload_bits + 7) / 8;
      ++r.s.segments;
      r.s.estimated_fp_rate += run.fp();
      runs_fp += run.fp();
      r.min_ms = std::min(r.min_ms, s.min_event_ms);
      r.max_ms = std::max(r.max_ms, s.max_event_ms);
    }
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.index < b.index; });
  // F: the runs' union bound plus the legacy slices' rate.
  st.estimated_fp_rate = 1.0 - legacy_clean + runs_fp;
  for (const Row& r : rows) {
    if (st.slices == 0) {
      st.oldest_exposure_ms = r.min_ms;
      st.expires_at_ms = r.s.end_ms + policy.retention_ms();
    }
    st.newest_exposure_ms = std::max(st.newest_exposure_ms, r.max_ms);
    st.items += r.s.items;
    st.segments += r.s.segments;
    ++st.slices;
    st.slice_stats.push_back(r.s);
  }
  return st;
}

}  // namespace exposure_filter
