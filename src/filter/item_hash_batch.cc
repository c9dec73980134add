#include "src/filter/item_hash_batch.h"

// Inline XXH3 into this translation unit only (static functions, no symbol
// clash with libxxhash used elsewhere).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "exposure_filter/item_hash.h"

namespace exposure_filter {

void HashItemIds(const uint64_t* ids, size_t n, uint64_t* out) {
  for (size_t i = 0; i < n; ++i) {
    // HashItemId: the id's 8 little-endian bytes.
    unsigned char le[8];
    for (int b = 0; b < 8; ++b) {
      le[b] = static_cast<unsigned char>(ids[i] >> (8 * b));
    }
    out[i] = XXH3_64bits_withSeed(le, sizeof(le), kItemHashSeed);
  }
}

}  // namespace exposure_filter
