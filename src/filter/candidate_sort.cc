#include "src/filter/candidate_sort.h"

#include <algorithm>

namespace exposure_filter {

void SortKeysByHashPrefix(absl::Span<uint64_t> keys,
                          std::vector<uint64_t>& scratch) {
  // Bits 32..42, 43..53, 54..63: 2,048 buckets keep the three histograms
  // (24 KiB) in L1 next to a 5,000-key batch (40 KiB).
  constexpr int kPasses = 3;
  constexpr int kShift[kPasses] = {32, 43, 54};
  constexpr uint64_t kMask[kPasses] = {2047, 2047, 1023};
  uint32_t count[kPasses][2048] = {};
  for (uint64_t k : keys) {
    for (int p = 0; p < kPasses; ++p) ++count[p][(k >> kShift[p]) & kMask[p]];
  }
  scratch.resize(keys.size());
  uint64_t* src = keys.data();
  uint64_t* dst = scratch.data();
  for (int p = 0; p < kPasses; ++p) {
    uint32_t sum = 0;
    for (uint32_t& c : count[p]) {
      const uint32_t here = c;
      c = sum;
      sum += here;
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint64_t k = src[i];
      dst[count[p][(k >> kShift[p]) & kMask[p]]++] = k;
    }
    std::swap(src, dst);
  }
  // An odd number of passes leaves the result in scratch.
  std::copy(src, src + keys.size(), keys.data());
}

}  // namespace exposure_filter
