// FilterPolicy: the time geometry and false-positive budget of one surface's
// user filters, with the sizing tables precomputed once.
//
// Time slicing. Event times are cut into slices of `slice_span` on a global
// grid (slice i covers [i*span, (i+1)*span) Unix ms). A slice is dropped whole
// once its end is `retention` in the past, so an exposure is remembered for at
// least `retention` and at most `retention + slice_span`: the aging
// granularity is one slice span. At most ceil(retention/span) + 1 slices are
// live at once (L).
//
// FP budget. A lookup probes every live segment and is a false positive if any
// one of them is, so P(fp) <= sum of the segments' rates (union bound). Each
// of the L slices gets delta_s = 1 - (1 - delta)^(1/L). Inside a slice the
// first segment gets 3/4 of delta_s and growth segment j >= 1 (added when the
// previous ones are full) gets delta_s / 2^(j+2), so however many segments a
// slice grows they sum to < delta_s (the scalable Bloom filter of Almeida et
// al., 2007, with tightening ratio 1/2 after the first). Most slices never
// grow (they are sized from the previous slice or the opening batch), so the
// first segment's share decides the bits per item: 3/4 instead of 1/2 saves
// ~0.6 bits per item (bloom_math: 15.4 vs 16.3 bits at L = 7, delta = 1%).
//
// Sealing. When a newer slice opens, the older one is sealed: its segments'
// exact FP is measured from their bits (mean over blocks of
// (set bits / 512)^k) and over-sized segments are folded by an integer factor
// (exact, see BloomProbeTest.FoldingByAnIntegerFactorIsExact) while the sum
// stays within delta_s minus the budget reserved for growth segments that
// late events may still add (GrowthReserve).
#ifndef EXPOSURE_FILTER_SRC_FILTER_FILTER_POLICY_H_
#define EXPOSURE_FILTER_SRC_FILTER_FILTER_POLICY_H_

#include <array>
#include <cmath>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/filter/bloom_math.h"

namespace exposure_filter {

struct FilterPolicyOptions {
  double fp_rate = 0.01;
  absl::Duration retention = absl::Hours(24 * 30);
  absl::Duration slice_span = absl::Hours(24 * 5);
};

class FilterPolicy {
 public:
  // A slice grows at most this many segments; the last one then absorbs
  // everything (its FP rate rises and is reported). With growth factor 4 from
  // one block, 8 levels hold > 2 million items per slice.
  static constexpr int kMaxSegmentsPerSlice = 8;
  // Live slices a lookup may probe; bounds the cost of a lookup.
  static constexpr int kMaxLiveSlices = 8;
  // A new segment in a growing slice holds 4x what the slice holds already,
  // so 50,000 items arriving at once need ~6 segments, not ~11.
  static constexpr int kGrowthFactor = 4;

  static absl::StatusOr<FilterPolicy> Create(const FilterPolicyOptions& opts);

  double fp_rate() const { return fp_rate_; }
  int64_t retention_ms() const { return retention_ms_; }
  int64_t slice_span_ms() const { return slice_span_ms_; }
  int max_live_slices() const { return max_live_slices_; }
  double slice_fp_budget() const { return slice_fp_budget_; }

  // Sizing of segment `level` (0-based) within a slice.
  const BlockSizing& level_sizing(int level) const { return levels_[level]; }
  // Smallest segment: one block at level 0.
  uint64_t min_capacity() const { return min_capacity_; }
  // FP budget of segment `level` within a slice.
  double LevelFpBudget(int level) const {
    return level == 0 ? slice_fp_budget_ * 0.75
                      : std::ldexp(slice_fp_budget_, -(level + 2));
  }
  // Sum of the budgets of every level >= `levels` (>= 1): what a slice with
  // `levels` segments must leave free for growth segments added later.
  double GrowthReserve(int levels) const {
    return std::ldexp(slice_fp_budget_, -(levels + 1));
  }

  int64_t SliceIndexOf(int64_t event_ms) const {
    // Event times are validated non-negative, so division floors.
    return event_ms / slice_span_ms_;
  }
  int64_t SliceStartMs(int64_t index) const { return index * slice_span_ms_; }
  int64_t SliceEndMs(int64_t index) const {
    return (index + 1) * slice_span_ms_;
  }
  bool SliceLive(int64_t index, int64_t now_ms) const {
    return SliceEndMs(index) > now_ms - retention_ms_;
  }
  bool EventExpired(int64_t event_ms, int64_t now_ms) const {
    return event_ms < now_ms - retention_ms_;
  }

 private:
  FilterPolicy() = default;

  double fp_rate_ = 0;
  int64_t retention_ms_ = 0;
  int64_t slice_span_ms_ = 0;
  int max_live_slices_ = 0;
  double slice_fp_budget_ = 0;
  uint64_t min_capacity_ = 0;
  std::array<BlockSizing, kMaxSegmentsPerSlice> levels_{};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_FILTER_POLICY_H_
