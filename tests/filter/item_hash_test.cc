#include "exposure_filter/item_hash.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "exposure_filter/bloom_probe.h"
#include "src/filter/item_hash_batch.h"

namespace exposure_filter {
namespace {

// Values computed independently with Python's xxhash.xxh3_64_intdigest and
// the documented seed; they pin the hashing part of the filter format.
TEST(ItemHashTest, NumericIdsHashTheirLittleEndianBytes) {
  EXPECT_EQ(HashItemId(42), 0x2b32edbc4cf4067dull);
}

TEST(ItemHashTest, BatchHashingGivesTheSameValuesAsHashItemId) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> ids = {0, 1, 42, ~0ull, uint64_t{1} << 63};
  for (int i = 0; i < 1000; ++i) ids.push_back(rng());
  std::vector<uint64_t> hashes(ids.size());
  HashItemIds(ids.data(), ids.size(), hashes.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(hashes[i], HashItemId(ids[i])) << "id " << ids[i];
  }
  EXPECT_EQ(hashes[2], 0x2b32edbc4cf4067dull);  // pinned above
}

// Both kernels behind HashItemIds against the library, id by id, for
// every length a batch can have around the AVX-512 kernel's 8 lanes (the
// tail goes to the portable loop) and ids whose words test the rotation.
TEST(ItemHashTest, EveryKernelGivesTheLibrarysValues) {
  std::mt19937_64 rng(5);
  std::vector<uint64_t> ids = {0,
                               1,
                               42,
                               ~0ull,
                               uint64_t{1} << 63,
                               0xffffffffull,
                               0xffffffff00000000ull,
                               0x0123456789abcdefull};
  for (int i = 0; i < 2000; ++i) ids.push_back(rng());
  std::vector<uint64_t> expected(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) expected[i] = HashItemId(ids[i]);
  const bool avx512 = HashItemIdsAvx512Supported();
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9},
                   size_t{17}, ids.size()}) {
    std::vector<uint64_t> portable(n, 0), vector(n, 0), active(n, 0);
    HashItemIdsPortable(ids.data(), n, portable.data());
    HashItemIds(ids.data(), n, active.data());
    if (avx512) HashItemIdsAvx512(ids.data(), n, vector.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(portable[i], expected[i]) << "portable, id " << ids[i];
      ASSERT_EQ(active[i], expected[i]) << "HashItemIds, id " << ids[i];
      if (avx512) {
        ASSERT_EQ(vector[i], expected[i]) << "avx512, id " << ids[i];
      }
    }
  }
  RecordProperty("avx512_kernel_checked",
                 avx512 ? "yes" : "no (no CPU support)");
}

TEST(ItemHashTest, StringKeysHashTheirBytes) {
  EXPECT_EQ(HashItemKey("item-42"), 0x480e2991dcf32e6full);
  EXPECT_EQ(HashItemKey(""), 0xd6ac28aa10194ec7ull);
}

TEST(ItemHashTest, SeedSpellsExposure) {
  EXPECT_EQ(kItemHashSeed, 0x657275736f707865ull);
}

TEST(BloomProbeTest, BlockIndexIsFastRangeOfUpperHalf) {
  EXPECT_EQ(BlockIndex(0, 10), 0u);
  EXPECT_EQ(BlockIndex(~0ull, 10), 9u);
  EXPECT_EQ(BlockIndex(uint64_t{1} << 63, 10), 5u);
  EXPECT_EQ(BlockIndex(~0ull, 1), 0u);
}

TEST(BloomProbeTest, FoldingByAnIntegerFactorIsExact) {
  // Block i of an N-block segment equals the OR of blocks [i*f, (i+1)*f) of
  // an f*N-block segment: floor(floor(x*f*N)/f) == floor(x*N).
  for (uint64_t h = 1; h < (uint64_t{1} << 40);
       h = h * 7 + 0x9e3779b97f4a7c15) {
    for (uint32_t n : {1u, 3u, 64u, 1000u}) {
      for (uint32_t f : {2u, 3u, 5u}) {
        ASSERT_EQ(BlockIndex(h, n * f) / f, BlockIndex(h, n));
      }
    }
  }
}

TEST(BloomProbeTest, AddedItemIsContainedAndSetsAtMostKBits) {
  uint64_t block[kBlockWords] = {};
  const uint64_t h = HashItemId(7);
  BlockAdd(block, h, 6);
  EXPECT_TRUE(BlockMayContain(block, h, 6));
  int bits = 0;
  for (uint64_t w : block) bits += __builtin_popcountll(w);
  EXPECT_GE(bits, 1);
  EXPECT_LE(bits, 6);
}

}  // namespace
}  // namespace exposure_filter
