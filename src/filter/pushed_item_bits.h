// PushedItemBits: the bit filter in front of a replica's exact set of the
// items pushed since its user's snapshot (FilterReplica's Entry). A check
// tests all its candidates, 5,000 in a feed request, against those items,
// a few hundred in the feed benchmark: one bit per pushed item's top 12
// hash bits lets the exact set be probed only for the few candidates whose
// bit is set.
//
// Two kernels find those candidates, with one result: a portable loop, and
// an AVX-512 one that tests 16 hashes a step (the bits held in registers,
// each hash's word picked by permutes, its bit by a variable shift, the
// keep bytes by one byte test). ActivePushedCandidates() picks AVX-512
// where the CPU has it (F, BW, VL; no gathers, so AMD's Zen 4 too, unlike
// the claim probe), unless EXPOSURE_FILTER_PROBE_KERNEL=portable
// (probe_kernel.h).
#ifndef EXPOSURE_FILTER_SRC_FILTER_PUSHED_ITEM_BITS_H_
#define EXPOSURE_FILTER_SRC_FILTER_PUSHED_ITEM_BITS_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace exposure_filter {

// 4,096 bits: word = the hash's top 6 bits, bit = the next 6. At 200 items
// ~4.8% of the bits are set (1 - e^(-200/4096)), so a candidate not pushed
// passes ~1 time in 20; at the replica's default compaction point, 4,096
// items, ~63%. Bits are only ever set until Clear(): a bit left by an item
// dropped from the exact set costs a probe, never a wrong answer.
struct PushedItemBits {
  std::array<uint64_t, 64> words = {};

  void Add(uint64_t hash) {
    words[hash >> 58] |= uint64_t{1} << ((hash >> 52) & 63);
  }
  void Clear() { words = {}; }
};

// Writes to candidates[], ascending, each i < n whose keep[i] is 1 and whose
// hashes[i]'s bit is set; returns how many. candidates[] holds n entries;
// n < 2^32.
using PushedCandidatesFn = size_t (*)(const PushedItemBits& bits,
                                      const uint64_t* hashes, size_t n,
                                      const uint8_t* keep,
                                      uint32_t* candidates);

size_t PushedCandidatesPortable(const PushedItemBits& bits,
                                const uint64_t* hashes, size_t n,
                                const uint8_t* keep, uint32_t* candidates);
// Only call when Avx512BwVlSupported() (probe_kernel.h).
size_t PushedCandidatesAvx512(const PushedItemBits& bits,
                              const uint64_t* hashes, size_t n,
                              const uint8_t* keep, uint32_t* candidates);

// The kernel for this CPU (see above).
PushedCandidatesFn ActivePushedCandidates();

// Clears keep[i] (0 or 1) for each hashes[i] that `pushed` holds (a set of
// hashes with contains(); every hash it holds Add()ed to `bits`), probing
// it only for the candidates `find` passes. A chunk at a time: the indexes
// stay on the stack and in 32 bits whatever n.
template <typename HashSet>
void RemovePushedItems(const PushedItemBits& bits, const HashSet& pushed,
                       const uint64_t* hashes, size_t n, uint8_t* keep,
                       PushedCandidatesFn find = ActivePushedCandidates()) {
  constexpr size_t kChunk = 512;
  uint32_t candidates[kChunk];
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t len = std::min(kChunk, n - begin);
    const size_t found =
        find(bits, hashes + begin, len, keep + begin, candidates);
    for (size_t j = 0; j < found; ++j) {
      const size_t i = begin + candidates[j];
      if (pushed.contains(hashes[i])) keep[i] = 0;
    }
  }
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_PUSHED_ITEM_BITS_H_
