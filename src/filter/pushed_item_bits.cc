#include "src/filter/pushed_item_bits.h"

#include "src/filter/probe_kernel.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace exposure_filter {
namespace {

// The portable loop over i in [begin, n), appending after the first
// `found`. Without a branch on the test (kept or not is a coin flip after a
// filter's check): each index is written and counted only when it passes.
size_t AppendPortable(const PushedItemBits& bits, const uint64_t* hashes,
                      size_t begin, size_t n, const uint8_t* keep,
                      uint32_t* candidates, size_t found) {
  const uint64_t* words = bits.words.data();
  for (size_t i = begin; i < n; ++i) {
    const uint64_t h = hashes[i];
    candidates[found] = static_cast<uint32_t>(i);
    found += (keep[i] & (words[h >> 58] >> ((h >> 52) & 63))) & 1;
  }
  return found;
}

}  // namespace

size_t PushedCandidatesPortable(const PushedItemBits& bits,
                                const uint64_t* hashes, size_t n,
                                const uint8_t* keep, uint32_t* candidates) {
  return AppendPortable(bits, hashes, 0, n, keep, candidates, 0);
}

#if defined(__x86_64__)

// The portable loop's test, 16 lanes at a time, with the 4,096 bits held
// in 8 registers as 128 32-bit halves (x86 is little-endian): bit b of word
// w is bit b & 31 of half 2w + (b >> 5), i.e. half h >> 57 (the hash's top
// 7 bits), bit (h >> 52) & 31. So the hashes' upper halves suffice: 16 per
// register, each half picked by 4 two-register permutes and 3 blends, not
// a gather: 1.2 us for 5,000 candidates against 200 pushed items
// (BM_PushedCandidates), where gathers of 8 words or 16 halves took 1.6 and
// 1.5, the portable loop 5.1. The lanes that pass (~1 in 40: a set bit, 1
// in 20, on a kept candidate) are written one by one.
__attribute__((target("avx512f,avx512bw,avx512vl"))) size_t
PushedCandidatesAvx512(const PushedItemBits& bits, const uint64_t* hashes,
                       size_t n, const uint8_t* keep, uint32_t* candidates) {
  __m512i halves[8];
  for (int r = 0; r < 8; ++r) {
    halves[r] = _mm512_loadu_si512(bits.words.data() + 8 * r);
  }
  const __m512i odd_halves = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17,
                                              15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i low_five = _mm512_set1_epi32(31);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i index_bit5 = _mm512_set1_epi32(32);
  const __m512i index_bit6 = _mm512_set1_epi32(64);
  const __m128i keep_bit = _mm_set1_epi8(1);
  // The masked forms: the plain shifts pass an undefined vector, which
  // GCC 12's -Wmaybe-uninitialized rejects.
  constexpr __mmask16 kAll = 0xFFFF;
  size_t found = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i upper =
        _mm512_permutex2var_epi32(_mm512_loadu_si512(hashes + i), odd_halves,
                                  _mm512_loadu_si512(hashes + i + 8));
    const __m512i half = _mm512_maskz_srli_epi32(kAll, upper, 25);
    const __m512i bit =
        _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, upper, 20), low_five);
    // A permute reads the index's low 5 bits (32 halves of two registers);
    // bits 5 and 6 pick among the four pairs.
    const __m512i p0 = _mm512_permutex2var_epi32(halves[0], half, halves[1]);
    const __m512i p1 = _mm512_permutex2var_epi32(halves[2], half, halves[3]);
    const __m512i p2 = _mm512_permutex2var_epi32(halves[4], half, halves[5]);
    const __m512i p3 = _mm512_permutex2var_epi32(halves[6], half, halves[7]);
    const __mmask16 bit5 = _mm512_test_epi32_mask(half, index_bit5);
    const __mmask16 bit6 = _mm512_test_epi32_mask(half, index_bit6);
    const __m512i word =
        _mm512_mask_blend_epi32(bit6, _mm512_mask_blend_epi32(bit5, p0, p1),
                                _mm512_mask_blend_epi32(bit5, p2, p3));
    const __mmask16 set =
        _mm512_test_epi32_mask(_mm512_maskz_srlv_epi32(kAll, word, bit), one);
    // Bit 0 of each of the 16 keep bytes.
    const __mmask16 kept = _mm_test_epi8_mask(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(keep + i)), keep_bit);
    unsigned pass = set & kept;
    while (pass != 0) {
      candidates[found++] = static_cast<uint32_t>(i + __builtin_ctz(pass));
      pass &= pass - 1;
    }
  }
  return AppendPortable(bits, hashes, i, n, keep, candidates, found);
}

#else  // !defined(__x86_64__)

size_t PushedCandidatesAvx512(const PushedItemBits& bits,
                              const uint64_t* hashes, size_t n,
                              const uint8_t* keep, uint32_t* candidates) {
  return PushedCandidatesPortable(bits, hashes, n, keep, candidates);
}

#endif  // defined(__x86_64__)

PushedCandidatesFn ActivePushedCandidates() {
  static const PushedCandidatesFn fn =
      Avx512BwVlSupported() && !PortableKernelsForced()
          ? PushedCandidatesAvx512
          : PushedCandidatesPortable;
  return fn;
}

}  // namespace exposure_filter
