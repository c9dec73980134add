#include "src/filter/bloom_math.h"

#include <algorithm>
#include <cmath>

#include "exposure_filter/bloom_probe.h"

namespace exposure_filter {

double BlockedFpRate(double items_per_block, int k) {
  if (items_per_block <= 0) return 0.0;
  // From 2^16 items per block on, a block has an unset bit with probability
  // < 512 * e^-122: the rate is 1.0 in double precision. Loads like this come
  // only from hostile or saturated filters (a pulled filter's item_count is
  // not trusted); the cap keeps the sum short and its bounds within int.
  if (items_per_block >= 65536) return 1.0;
  const double lambda = items_per_block;
  // Sum the Poisson terms over lambda +- 12 sigma (+ a floor for tiny
  // lambda): the tails beyond carry < 1e-30 of the mass.
  const double spread = 12 * std::sqrt(lambda) + 20;
  const int last = static_cast<int>(lambda + spread);
  const double log_bit_untouched = std::log1p(-1.0 / kBlockBits);
  // P(j = first). Below lambda = 700 start at j = 0 with e^-lambda; above,
  // e^-lambda underflows to 0, so start at the lower tail in log space.
  int first = 0;
  double pois = std::exp(-lambda);
  if (lambda >= 700) {
    first = static_cast<int>(lambda - spread);
    int sign;
    pois = std::exp(first * std::log(lambda) - lambda -
                    lgamma_r(first + 1.0, &sign));  // reentrant lgamma
  }
  double fp = 0;
  for (int j = first; j <= last; ++j) {
    if (j > first) pois *= lambda / j;
    const double bit_set = -std::expm1(k * j * log_bit_untouched);
    fp += pois * std::pow(bit_set, k);
  }
  // Rounding in the sum of Poisson terms can overshoot 1 at heavy loads.
  return std::min(fp, 1.0);
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
