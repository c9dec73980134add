// Batch hashing of numeric item ids: the same values as HashItemId()
// (include/exposure_filter/item_hash.h, the format's definition), computed
// by an inlined XXH3 instead of a call into libxxhash per id. A 5,000-
// candidate request hashes every id once; the library call and its length
// dispatch cost more than the 8-byte hash itself.
//
// Two kernels give the same values: a portable loop over the library's
// inlined XXH3, and an AVX-512 one that hashes 8 ids per instruction
// sequence (XXH3 of an 8-byte input is a rotation, a xor with a constant of
// the secret and the seed, and the rrmxmx mix: rotations, 64-bit multiplies
// and shifts, each one AVX-512 instruction on 8 lanes). xxHash has no batch
// entry point for many short inputs; GCC does not vectorise the inlined
// loop even at -march=x86-64-v4. The AVX-512 kernel is compiled with a
// function target attribute and chosen at startup only when the CPU has
// AVX-512 F and DQ (unless EXPOSURE_FILTER_PROBE_KERNEL=portable); tests
// check it against the library id by id (tests/filter/item_hash_test.cc).
#ifndef EXPOSURE_FILTER_SRC_FILTER_ITEM_HASH_BATCH_H_
#define EXPOSURE_FILTER_SRC_FILTER_ITEM_HASH_BATCH_H_

#include <cstddef>
#include <cstdint>

namespace exposure_filter {

// out[i] = HashItemId(ids[i]) for i < n, by the kernel chosen for this CPU.
void HashItemIds(const uint64_t* ids, size_t n, uint64_t* out);

// The kernels behind HashItemIds (tests and benches).
void HashItemIdsPortable(const uint64_t* ids, size_t n, uint64_t* out);
// Only call when HashItemIdsAvx512Supported().
void HashItemIdsAvx512(const uint64_t* ids, size_t n, uint64_t* out);
bool HashItemIdsAvx512Supported();

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_ITEM_HASH_BATCH_H_
