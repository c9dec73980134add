#include "src/filter/claim_probe.h"

#include <cstddef>

#include "absl/base/optimization.h"
#include "src/filter/probe_kernel.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace exposure_filter {
namespace {

// Whether one of the bucket's codes after its first, entries lo + 1 ..
// lo + len - 1, claims granule g.
inline bool RestClaims(const FiledClaim* entries, uint32_t lo, uint32_t len,
                       uint32_t g) {
  bool hit = false;
  for (uint32_t j = lo + 1; j < lo + len; ++j) {
    hit |= g - entries[j].first <= entries[j].width;
  }
  return hit;
}

}  // namespace

void ProbeClaimsPortable(const FiledClaims& claims, const uint64_t* hashes,
                         size_t n, uint8_t* keep) {
  const uint32_t* start = claims.start;
  const FiledClaim* entries = claims.entries;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t g = static_cast<uint32_t>(hashes[i] >> 32);  // granule
    const uint32_t x = g >> claims.shift;
    const uint32_t lo = start[x];
    const uint32_t len = start[x + 1] - lo;
    // One check without a branch (the bucket's first entry, or the next
    // bucket's / the padding when it is empty: masked by len), more only
    // for buckets holding two or more codes.
    bool hit = (len != 0) & (g - entries[lo].first <= entries[lo].width);
    if (ABSL_PREDICT_FALSE(len > 1)) hit |= RestClaims(entries, lo, len, g);
    keep[i] &= static_cast<uint8_t>(!hit);
  }
}

#if defined(__x86_64__)

// An index of 2^15 buckets or more (users of ~8,000 codes and up: 128 KB
// of bucket starts and more) has its starts prefetched for the candidates
// this far ahead: BM_ClaimIndexProbeAcrossUsers/20000/64, 5,000 candidates
// against one of 64 such users in turn, median 14.2 -> 5.7 ns a candidate
// (min 6.4 -> 4.9). Smaller indexes sit in cache or nearly: at 2,000 codes
// the prefetches measured even across 64 users and no better for one.
constexpr size_t kPrefetchAhead = 64;
constexpr int kPrefetchFromBucketBits = 15;

// The portable loop's steps, 16 lanes at a time: the granules are the odd
// 32-bit words of 16 hashes (little-endian), the bucket's start and end and
// its first entry's two words come from four gathers, and the lanes whose
// bucket holds more than one code check the rest one by one (a bucket holds
// a quarter of a code on average, claim_index.h: 2.6% of the buckets a
// random candidate lands in hold two or more, 22% of a claimed one's).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void ProbeClaimsAvx512(
    const FiledClaims& claims, const uint64_t* hashes, size_t n,
    uint8_t* keep) {
  // The gathers address bytes: an entry is 8 of them, its width 4 in.
  static_assert(sizeof(FiledClaim) == 8 && offsetof(FiledClaim, width) == 4);
  const void* start = claims.start;
  const void* start_next = claims.start + 1;
  const void* first = &claims.entries->first;
  const void* width = &claims.entries->width;
  const __m512i odd_words = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15,
                                             13, 11, 9, 7, 5, 3, 1);
  const __m512i one = _mm512_set1_epi32(1);
  const __m128i shift = _mm_cvtsi32_si128(claims.shift);
  // The masked forms with a zero source throughout: the plain ones pass an
  // undefined vector, which GCC 12's -Wmaybe-uninitialized rejects.
  const __m512i zero = _mm512_setzero_si512();
  constexpr __mmask16 kAll = 0xFFFF;
  alignas(64) uint32_t lane_g[16], lane_lo[16], lane_len[16];
  alignas(64) uint32_t ahead[16];
  const uint32_t* starts = claims.start;
  const size_t prefetch_end =
      32 - claims.shift >= kPrefetchFromBucketBits && n >= kPrefetchAhead
          ? n - kPrefetchAhead
          : 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (i + 16 <= prefetch_end) {
      const __m512i pa = _mm512_loadu_si512(hashes + i + kPrefetchAhead);
      const __m512i pb = _mm512_loadu_si512(hashes + i + kPrefetchAhead + 8);
      _mm512_store_si512(
          ahead,
          _mm512_maskz_srl_epi32(
              kAll, _mm512_permutex2var_epi32(pa, odd_words, pb), shift));
      for (const uint32_t x : ahead) _mm_prefetch(starts + x, _MM_HINT_T0);
    }
    const __m512i a = _mm512_loadu_si512(hashes + i);
    const __m512i b = _mm512_loadu_si512(hashes + i + 8);
    const __m512i g = _mm512_permutex2var_epi32(a, odd_words, b);
    const __m512i x = _mm512_maskz_srl_epi32(kAll, g, shift);
    const __m512i lo = _mm512_mask_i32gather_epi32(zero, kAll, x, start, 4);
    const __m512i end =
        _mm512_mask_i32gather_epi32(zero, kAll, x, start_next, 4);
    const __m512i len = _mm512_sub_epi32(end, lo);
    // Entry lo's words: index lo at scale 8 from the firsts and from the
    // widths one word on.
    const __m512i f = _mm512_mask_i32gather_epi32(zero, kAll, lo, first, 8);
    const __m512i w = _mm512_mask_i32gather_epi32(zero, kAll, lo, width, 8);
    __mmask16 hit = _mm512_mask_cmple_epu32_mask(
        _mm512_test_epi32_mask(len, len), _mm512_sub_epi32(g, f), w);
    __mmask16 more = _mm512_cmpgt_epu32_mask(len, one);
    if (ABSL_PREDICT_FALSE(more != 0)) {
      _mm512_store_si512(lane_g, g);
      _mm512_store_si512(lane_lo, lo);
      _mm512_store_si512(lane_len, len);
      do {
        const int lane = __builtin_ctz(more);
        more &= more - 1;
        const bool h = RestClaims(claims.entries, lane_lo[lane], lane_len[lane],
                                  lane_g[lane]);
        hit |= static_cast<__mmask16>(h) << lane;
      } while (more != 0);
    }
    const __m128i k = _mm_loadu_si128(reinterpret_cast<__m128i*>(keep + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(keep + i),
                     _mm_mask_mov_epi8(k, hit, _mm_setzero_si128()));
  }
  ProbeClaimsPortable(claims, hashes + i, n - i, keep + i);
}

#else  // !defined(__x86_64__)

void ProbeClaimsAvx512(const FiledClaims& claims, const uint64_t* hashes,
                       size_t n, uint8_t* keep) {
  ProbeClaimsPortable(claims, hashes, n, keep);
}

#endif  // defined(__x86_64__)

ClaimProbeFn ActiveClaimProbe() {
  static const ClaimProbeFn fn = Avx512GathersFast() && !PortableKernelsForced()
                                     ? ProbeClaimsAvx512
                                     : ProbeClaimsPortable;
  return fn;
}

}  // namespace exposure_filter
