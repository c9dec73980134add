// Batch hashing of numeric item ids: the same values as HashItemId()
// (include/exposure_filter/item_hash.h, the format's definition), computed
// by an inlined XXH3 instead of a call into libxxhash per id. A 5,000-
// candidate request hashes every id once; the library call and its length
// dispatch cost more than the 8-byte hash itself.
#ifndef EXPOSURE_FILTER_SRC_FILTER_ITEM_HASH_BATCH_H_
#define EXPOSURE_FILTER_SRC_FILTER_ITEM_HASH_BATCH_H_

#include <cstddef>
#include <cstdint>

namespace exposure_filter {

// out[i] = HashItemId(ids[i]) for i < n.
void HashItemIds(const uint64_t* ids, size_t n, uint64_t* out);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_ITEM_HASH_BATCH_H_
