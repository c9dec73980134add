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

}  // namespace
}  // namespace exposure_filter
