#include "src/filter/item_hash_batch.h"

#include <cstring>

// Inline XXH3 into this translation unit only (static functions, no symbol
// clash with libxxhash used elsewhere).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "absl/base/internal/endian.h"
#include "exposure_filter/item_hash.h"
#include "src/filter/probe_kernel.h"

#if defined(__x86_64__)
#define EF_HAVE_X86_64 1
#else
#define EF_HAVE_X86_64 0
#endif

namespace exposure_filter {

void HashItemIdsPortable(const uint64_t* ids, size_t n, uint64_t* out) {
  for (size_t i = 0; i < n; ++i) {
    // HashItemId: the id's 8 little-endian bytes, stored as one word. Byte
    // by byte, GCC at -O2 (RelWithDebInfo, the default build) keeps the
    // eight stores and XXH3's 4-byte loads then wait on a failed store
    // forward: 68.5 us per 5,000 ids instead of 6.0 (a standalone copy;
    // now bench/filter_bench BM_HashItemIds: 6.6 us at -O2, 6.0 at -O3).
    unsigned char le[8];
    absl::little_endian::Store64(le, ids[i]);
    out[i] = XXH3_64bits_withSeed(le, sizeof(le), kItemHashSeed);
  }
}

#if EF_HAVE_X86_64

namespace {

// XXH3_len_4to8_64b's constant for our seed: the secret's words at 8 and 16
// xor'ed, minus the seed with its low half byte-swapped into the high half.
uint64_t LenFourToEightBitflip() {
  const uint64_t seed =
      kItemHashSeed ^
      (static_cast<uint64_t>(XXH_swap32(static_cast<uint32_t>(kItemHashSeed)))
       << 32);
  return (XXH_readLE64(XXH3_kSecret + 8) ^ XXH_readLE64(XXH3_kSecret + 16)) -
         seed;
}

}  // namespace

// XXH3_64bits_withSeed of 8 bytes (XXH3_len_4to8_64b, then XXH3_rrmxmx), 8
// ids at a time in GCC's vector extension (the rotations become vprolq, the
// multiplies vpmullq; the intrinsics trip GCC 12's -Wmaybe-uninitialized on
// their undefined pass-through operand). The input's two little-endian
// 4-byte words are recombined high word first: the id (x86 is little-
// endian) rotated by 32.
__attribute__((target("avx512f,avx512dq"))) void HashItemIdsAvx512(
    const uint64_t* ids, size_t n, uint64_t* out) {
  using Lanes = uint64_t __attribute__((vector_size(64)));
  static const uint64_t bitflip = LenFourToEightBitflip();
  constexpr uint64_t kMx2 = 0x9FB21C651E98DF25ULL;  // XXH3_rrmxmx's
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Lanes h;
    std::memcpy(&h, ids + i, sizeof(h));
    h = ((h << 32) | (h >> 32)) ^ bitflip;
    h ^= ((h << 49) | (h >> 15)) ^ ((h << 24) | (h >> 40));
    h *= kMx2;
    h ^= (h >> 35) + 8;  // + len
    h *= kMx2;
    h ^= h >> 28;
    std::memcpy(out + i, &h, sizeof(h));
  }
  HashItemIdsPortable(ids + i, n - i, out + i);
}

bool HashItemIdsAvx512Supported() {
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512dq");
}

#else  // !EF_HAVE_X86_64

void HashItemIdsAvx512(const uint64_t* ids, size_t n, uint64_t* out) {
  HashItemIdsPortable(ids, n, out);
}

bool HashItemIdsAvx512Supported() { return false; }

#endif  // EF_HAVE_X86_64

void HashItemIds(const uint64_t* ids, size_t n, uint64_t* out) {
  static const bool avx512 =
      HashItemIdsAvx512Supported() && !PortableKernelsForced();
  if (avx512) {
    HashItemIdsAvx512(ids, n, out);
  } else {
    HashItemIdsPortable(ids, n, out);
  }
}

}  // namespace exposure_filter
