#include "src/filter/bloom_math.h"

#include <algorithm>
#include <cmath>

#include "exposure_filter/bloom_probe.h"

namespace exposure_filter {

double BlockedFpRate(double items_per_block, int k) {
  if (items_per_block <= 0) return 0.0;
  const double lambda = items_per_block;
  // Sum the Poisson terms out to lambda + 12 sigma (+ a floor for tiny
  // lambda): the tail beyond carries < 1e-30 of the mass.
  const int last = static_cast<int>(lambda + 12 * std::sqrt(lambda) + 20);
  const double log_bit_untouched = std::log1p(-1.0 / kBlockBits);
  double pois = std::exp(-lambda);  // P(j = 0)
  double fp = 0;
  for (int j = 0; j <= last; ++j) {
    if (j > 0) pois *= lambda / j;
    const double bit_set = -std::expm1(k * j * log_bit_untouched);
    fp += pois * std::pow(bit_set, k);
  }
  return fp;
}

BlockSizing SizeForFpRate(double fp_target) {
  BlockSizing best;
  for (int k = kMinProbes; k <= kMaxProbes; ++k) {
    // fp is increasing in the load, so bisect for the largest admissible one.
    double lo = 0, hi = kBlockBits;
    for (int iter = 0; iter < 60; ++iter) {
      const double mid = (lo + hi) / 2;
      (BlockedFpRate(mid, k) <= fp_target ? lo : hi) = mid;
    }
    if (lo > best.max_items_per_block) best = BlockSizing{k, lo};
  }
  return best;
}

uint32_t BlocksForCapacity(uint64_t capacity, const BlockSizing& sizing) {
  const double blocks =
      std::ceil(static_cast<double>(capacity) / sizing.max_items_per_block);
  // A segment never exceeds 2^26 blocks (4 GiB); callers cap capacity far
  // below that, this only keeps the conversion defined.
  return static_cast<uint32_t>(std::clamp(blocks, 1.0, double{1u << 26}));
}

uint64_t CapacityOfBlocks(uint32_t num_blocks, const BlockSizing& sizing) {
  return static_cast<uint64_t>(
      std::floor(num_blocks * sizing.max_items_per_block));
}

}  // namespace exposure_filter
