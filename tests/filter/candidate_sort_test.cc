#include "src/filter/candidate_sort.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/filter/fingerprint_run.h"

namespace exposure_filter {
namespace {

std::vector<uint64_t> StableByTopBits(std::vector<uint64_t> keys) {
  std::stable_sort(keys.begin(), keys.end(), [](uint64_t a, uint64_t b) {
    return (a >> 32) < (b >> 32);
  });
  return keys;
}

TEST(CandidateSortTest, EqualsAStableSortByTheTop32Bits) {
  std::mt19937_64 rng(1);
  std::vector<uint64_t> scratch;
  for (size_t m : {0, 1, 2, 17, 5000, 20000}) {
    std::vector<uint64_t> keys(m);
    for (size_t i = 0; i < m; ++i) {
      // A quarter repeat an earlier hash: equal top bits, different tags.
      const uint64_t h = i % 4 == 3 ? keys[i - 1] : rng();
      keys[i] = FingerprintRun::SortKey(h, static_cast<uint32_t>(i));
    }
    const std::vector<uint64_t> expected = StableByTopBits(keys);
    SortKeysByHashPrefix(absl::MakeSpan(keys), scratch);
    EXPECT_EQ(keys, expected) << "m=" << m;
  }
}

// Hashes that differ only in the top 10 or the lowest of the 32 bits: each
// radix pass must be right on its own.
TEST(CandidateSortTest, EveryDigitOrders) {
  std::vector<uint64_t> keys;
  for (uint64_t top : {uint64_t{1} << 63, uint64_t{1} << 54, uint64_t{1} << 43,
                       uint64_t{1} << 32, uint64_t{0}}) {
    keys.push_back(
        FingerprintRun::SortKey(top, static_cast<uint32_t>(keys.size())));
  }
  std::vector<uint64_t> scratch;
  const std::vector<uint64_t> expected = StableByTopBits(keys);
  SortKeysByHashPrefix(absl::MakeSpan(keys), scratch);
  EXPECT_EQ(keys, expected);
}

// The bucket pass must keep every key once and put each inside its bucket's
// bounds: a run checks only [bucket_start[j], bucket_start[j + 1]), so a
// key outside its bucket is a false negative.
TEST(CandidateSorterTest, BucketsHoldEveryKeyInsideItsBounds) {
  std::mt19937_64 rng(3);
  CandidateSorter sorter;  // reused across sizes, as per thread
  for (size_t m : {0, 1, 2, 3, 17, 5000, 20000, 100000}) {
    std::vector<uint64_t> keys(m);
    for (size_t i = 0; i < m; ++i) {
      const uint64_t h = i % 4 == 3 ? keys[i - 1] : rng();
      keys[i] = FingerprintRun::SortKey(h, static_cast<uint32_t>(i));
    }
    const BucketedCandidates c = sorter.Bucket(keys);
    ASSERT_EQ(c.size, m);
    std::vector<uint64_t> got(c.keys, c.keys + c.size);
    std::vector<uint64_t> want = keys;
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    ASSERT_EQ(got, want) << "m=" << m;  // a permutation
    const size_t buckets = size_t{1} << c.bucket_bits;
    ASSERT_EQ(c.bucket_start[0], 0u);
    ASSERT_EQ(c.bucket_start[buckets], m);
    // lambda = m / 2^B in (0.5, 1] (up to the 2^14 cap).
    if (m >= 2 && m < (size_t{1} << 14)) {
      ASSERT_GT(2 * buckets, m);
      ASSERT_LE(buckets, m);
    }
    for (size_t j = 0; j < buckets; ++j) {
      ASSERT_LE(c.bucket_start[j], c.bucket_start[j + 1]);
      for (size_t at = c.bucket_start[j]; at < c.bucket_start[j + 1]; ++at) {
        const uint64_t top =
            c.bucket_bits == 0 ? 0 : c.keys[at] >> (64 - c.bucket_bits);
        ASSERT_EQ(top, j) << "m=" << m << " at=" << at;
      }
    }
    for (size_t p = 0; p < BucketedCandidates::kPadding; ++p) {
      ASSERT_EQ(c.keys[m + p], 0u);  // readable, zero
    }
  }
}

}  // namespace
}  // namespace exposure_filter
