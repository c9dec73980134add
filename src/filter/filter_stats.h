// What GetUserStats and Explain report about one user's filter.
#ifndef EXPOSURE_FILTER_SRC_FILTER_FILTER_STATS_H_
#define EXPOSURE_FILTER_SRC_FILTER_FILTER_STATS_H_

#include <cstdint>
#include <vector>

namespace exposure_filter {

// Counts of a filter's parts (proto SliceStats / GetUserStatsResponse):
// `segments` adds up the runs and legacy Bloom segments as they are held in
// memory (a run kept as a run and its tail counts twice); `runs` counts the
// runs as GetFilter encodes them (a run and its tail are one), and
// `bloom_segments` the legacy Bloom segments.
struct SliceStats {
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  uint64_t items = 0;
  uint64_t capacity = 0;
  uint64_t bytes = 0;
  uint32_t segments = 0;
  uint32_t runs = 0;
  uint32_t bloom_segments = 0;
  double estimated_fp_rate = 0;
};

struct UserFilterStats {
  uint64_t items = 0;
  uint64_t bytes = 0;
  uint32_t slices = 0;
  uint32_t segments = 0;
  uint32_t runs = 0;
  uint32_t bloom_segments = 0;
  double estimated_fp_rate = 0;
  int64_t oldest_exposure_ms = 0;
  int64_t newest_exposure_ms = 0;
  int64_t expires_at_ms = 0;
  std::vector<SliceStats> slice_stats;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_FILTER_STATS_H_
