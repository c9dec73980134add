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

// The bucket index must bound every bucket exactly: a run starts its scan
// at bucket_start[j], so an entry one too high skips a candidate.
void ExpectBucketIndexBounds(const SortedCandidates& sorted) {
  const size_t buckets = size_t{1} << sorted.bucket_bits;
  const int shift = 64 - sorted.bucket_bits;
  for (size_t j = 0; j <= buckets; ++j) {
    const size_t at = sorted.bucket_start[j];
    ASSERT_LE(at, sorted.keys.size()) << "bucket " << j;
    if (at > 0 && sorted.bucket_bits > 0) {
      ASSERT_LT(sorted.keys[at - 1] >> shift, j) << "bucket " << j;
    }
    if (at < sorted.keys.size() && sorted.bucket_bits > 0) {
      ASSERT_GE(sorted.keys[at] >> shift, j) << "bucket " << j;
    }
  }
  EXPECT_EQ(sorted.bucket_start[0], 0u);
  EXPECT_EQ(sorted.bucket_start[buckets], sorted.keys.size());
}

TEST(CandidateSorterTest, SortsLikeTheFunctionAndIndexesEveryBucket) {
  std::mt19937_64 rng(3);
  CandidateSorter sorter;  // reused across sizes, as per thread
  for (size_t m : {0, 1, 2, 3, 17, 5000, 20000, 100000}) {
    std::vector<uint64_t> keys(m);
    for (size_t i = 0; i < m; ++i) {
      const uint64_t h = i % 4 == 3 ? keys[i - 1] : rng();
      keys[i] = FingerprintRun::SortKey(h, static_cast<uint32_t>(i));
    }
    const std::vector<uint64_t> expected = StableByTopBits(keys);
    const SortedCandidates sorted = sorter.Sort(absl::MakeSpan(keys));
    ASSERT_EQ(sorted.keys.data(), keys.data());
    ASSERT_EQ(keys, expected) << "m=" << m;
    ExpectBucketIndexBounds(sorted);
  }
}

// Hashes a client could choose: all in one bucket of the counting pass.
// The insertion pass runs out of its move budget and the LSD sort takes
// over; the result must still be the stable sort, with a right index.
TEST(CandidateSorterTest, CrowdedBucketFallsBackToTheStableRadixSort) {
  std::mt19937_64 rng(4);
  std::vector<uint64_t> keys(5000);
  for (size_t i = 0; i < keys.size(); ++i) {
    // Top 20 bits fixed, the next 12 random (few distinct values: ties).
    const uint64_t h = (uint64_t{0xABCDE} << 44) | ((rng() & 0xfff) << 32);
    keys[i] = FingerprintRun::SortKey(h, static_cast<uint32_t>(i));
  }
  const std::vector<uint64_t> expected = StableByTopBits(keys);
  CandidateSorter sorter;
  const SortedCandidates sorted = sorter.Sort(absl::MakeSpan(keys));
  EXPECT_EQ(keys, expected);
  ExpectBucketIndexBounds(sorted);
  std::vector<uint64_t> again = expected, scratch;
  std::reverse(again.begin(), again.end());  // descending: most moves
  SortKeysByHashPrefix(absl::MakeSpan(again), scratch);
  std::vector<uint64_t> reversed = expected;
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_EQ(again, StableByTopBits(reversed));
}

}  // namespace
}  // namespace exposure_filter
