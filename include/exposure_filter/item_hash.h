// How items become the 64-bit hashes the filter stores.
//
// Every item is hashed exactly once, with XXH3-64 and the fixed seed below;
// all Bloom probes are derived from that one value (see bloom_probe.h).
//   numeric id  -> XXH3_64bits_withSeed(8 little-endian bytes of the id, seed)
//   string key  -> XXH3_64bits_withSeed(the key's bytes, seed)
// The seed is part of the portable filter format (docs/filter-format.md).
#ifndef EXPOSURE_FILTER_ITEM_HASH_H_
#define EXPOSURE_FILTER_ITEM_HASH_H_

#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace exposure_filter {

// ASCII "exposure" read as a little-endian u64.
inline constexpr uint64_t kItemHashSeed = 0x657275736f707865ull;

inline uint64_t HashItemId(uint64_t id) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(id >> (8 * i));
  return XXH3_64bits_withSeed(le, sizeof(le), kItemHashSeed);
}

inline uint64_t HashItemKey(std::string_view key) {
  return XXH3_64bits_withSeed(key.data(), key.size(), kItemHashSeed);
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_ITEM_HASH_H_
