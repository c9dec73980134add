// False-positive math for the cache-line blocked Bloom filter, and the sizing
// rules derived from it.
//
// Classical Bloom filter with m bits, n items, k probes:
//   delta ~= (1 - e^(-k n / m))^k,  optimum m = n ln(1/delta) / ln^2 2.
// A blocked filter puts all k probes of an item in one 512-bit block, so the
// load of a block varies: with N blocks the number of items in a given block
// is ~ Poisson(lambda = n / N), and
//   fp(lambda, k) = sum_j Pois(j; lambda) * (1 - (1 - 1/512)^(k j))^k.
// This is a few percent worse than the classical formula at the same bits per
// item, which is why we size from it and not from the classical one.
#ifndef EXPOSURE_FILTER_SRC_FILTER_BLOOM_MATH_H_
#define EXPOSURE_FILTER_SRC_FILTER_BLOOM_MATH_H_

#include <cstdint>

namespace exposure_filter {

// Expected false-positive rate of a blocked Bloom filter whose blocks hold
// `items_per_block` items on average, with `k` probes per item.
double BlockedFpRate(double items_per_block, int k);

// Sizing for one false-positive target: the largest average block load that
// keeps fp(load, k) <= target, with the k that allows it.
struct BlockSizing {
  int k = 1;
  double max_items_per_block = 0;  // lambda*, may be < 1 for tiny targets
};
BlockSizing SizeForFpRate(double fp_target);

// Blocks needed to hold `capacity` items within `sizing`, at least one.
uint32_t BlocksForCapacity(uint64_t capacity, const BlockSizing& sizing);

// Items `num_blocks` blocks hold within `sizing` (floor).
uint64_t CapacityOfBlocks(uint32_t num_blocks, const BlockSizing& sizing);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_BLOOM_MATH_H_
