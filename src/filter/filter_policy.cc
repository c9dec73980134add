#include "src/filter/filter_policy.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace exposure_filter {

absl::StatusOr<FilterPolicy> FilterPolicy::Create(
    const FilterPolicyOptions& opts) {
  // Below 1e-6 the deepest segment levels would need < 1 item per block.
  if (!(opts.fp_rate >= 1e-6 && opts.fp_rate <= 0.5)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fp_rate must be in [1e-6, 0.5], got ", opts.fp_rate));
  }
  if (opts.slice_span < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slice_span must be >= 1s, got ", absl::FormatDuration(opts.slice_span)));
  }
  if (opts.retention < opts.slice_span) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retention (", absl::FormatDuration(opts.retention),
        ") must be >= slice_span (", absl::FormatDuration(opts.slice_span),
        ")"));
  }
  if (opts.retention == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError("retention must be finite");
  }
  FilterPolicy p;
  p.fp_rate_ = opts.fp_rate;
  p.retention_ms_ = absl::ToInt64Milliseconds(opts.retention);
  p.slice_span_ms_ = absl::ToInt64Milliseconds(opts.slice_span);
  // ceil(retention / span) + 1, without the overflow of retention + span - 1
  // near INT64_MAX (a huge retention saturates to it).
  const int64_t live = p.retention_ms_ / p.slice_span_ms_ +
                       (p.retention_ms_ % p.slice_span_ms_ != 0 ? 1 : 0) + 1;
  if (live > kMaxLiveSlices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retention/slice_span allows ", live, " live slices; at most ",
        kMaxLiveSlices, " keep a lookup to a few cache misses: raise "
        "slice_span to at least ",
        absl::FormatDuration(opts.retention / (kMaxLiveSlices - 1))));
  }
  p.max_live_slices_ = static_cast<int>(live);
  p.slice_fp_budget_ = -std::expm1(std::log1p(-opts.fp_rate) / live);
  for (int j = 0; j < kMaxSegmentsPerSlice; ++j) {
    p.levels_[j] = SizeForFpRate(p.LevelFpBudget(j));
  }
  p.min_capacity_ = std::max<uint64_t>(1, CapacityOfBlocks(1, p.levels_[0]));
  return p;
}

}  // namespace exposure_filter
