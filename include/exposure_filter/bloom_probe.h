// Probe arithmetic of the exposure filter's cache-line blocked Bloom filter.
//
// This header is the single definition of where an item's bits live, shared by
// the server (src/filter/) and by clients that test candidates locally against
// a pulled filter. docs/filter-format.md specifies the same arithmetic in
// prose; tests/testdata/ pins it. Changing anything here changes the format.
//
// Layout: a segment is an array of 64-byte blocks; a block is eight 64-bit
// little-endian words; bit b of a block (0..511) is bit (b & 63) of word
// (b >> 6). One item touches exactly one block, so a lookup costs one cache
// miss per segment.
#ifndef EXPOSURE_FILTER_BLOOM_PROBE_H_
#define EXPOSURE_FILTER_BLOOM_PROBE_H_

#include <cstdint>

namespace exposure_filter {

inline constexpr uint32_t kBlockBytes = 64;
inline constexpr uint32_t kBlockWords = 8;
inline constexpr uint32_t kBlockBits = 512;
inline constexpr int kMinProbes = 1;
inline constexpr int kMaxProbes = 16;

// Golden-ratio multiplier (2^32 / phi, odd): successive products walk the
// 32-bit ring so that the top 9 bits of each product look independent, as in
// RocksDB's FastLocalBloom.
inline constexpr uint32_t kProbeMultiplier = 0x9e3779b9u;

// Block of `item_hash` in a segment of `num_blocks` blocks: multiply-shift
// "fast range" of the hash's upper 32 bits, i.e. floor(hi * num_blocks / 2^32).
// Unlike `%`, this lets a segment of f*N blocks fold exactly onto N blocks
// (block i of the small filter = OR of blocks [i*f, (i+1)*f)).
inline uint32_t BlockIndex(uint64_t item_hash, uint32_t num_blocks) {
  return static_cast<uint32_t>(((item_hash >> 32) * num_blocks) >> 32);
}

// Calls `visit(word, mask)` for each of the `k` probe bits of `item_hash`
// inside its block. The lower 32 bits of the hash seed the probes, so they are
// independent of the block choice above.
template <typename Visit>
inline void ForEachProbe(uint64_t item_hash, int k, Visit&& visit) {
  uint32_t h = static_cast<uint32_t>(item_hash);
  for (int i = 0; i < k; ++i) {
    const uint32_t bit = h >> 23;  // top 9 bits: 0..511
    visit(bit >> 6, uint64_t{1} << (bit & 63));
    h *= kProbeMultiplier;
  }
}

// True iff every probe bit of `item_hash` is set in `block` (8 words).
inline bool BlockMayContain(const uint64_t* block, uint64_t item_hash, int k) {
  bool all = true;
  ForEachProbe(item_hash, k, [&](uint32_t word, uint64_t mask) {
    all &= (block[word] & mask) != 0;
  });
  return all;
}

inline void BlockAdd(uint64_t* block, uint64_t item_hash, int k) {
  ForEachProbe(item_hash, k,
               [&](uint32_t word, uint64_t mask) { block[word] |= mask; });
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_BLOOM_PROBE_H_
