// bit_words.h. FieldSummer: the sum of consecutive k-bit fields equals the
// sum read field by field, for every k (the multiply's slots and the
// pairwise adds), any alignment and counts across many peeks, with every bit
// set as often as not (the largest sums are where slots could carry).
// OrBits: the copy, bit for bit.
#include "src/filter/bit_words.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

uint64_t FieldAt(const std::vector<uint64_t>& words, uint64_t pos, int k) {
  uint64_t v = 0;
  for (int b = 0; b < k; ++b) {
    const uint64_t at = pos + b;
    v |= ((words[at >> 6] >> (at & 63)) & 1) << b;
  }
  return v;
}

TEST(FieldSummerTest, SumsTheFieldsForEveryK) {
  std::mt19937_64 rng(31);
  for (int k = 1; k <= 31; ++k) {
    const FieldSummer summer(k);
    for (int trial = 0; trial < 300; ++trial) {
      const uint32_t c = 1 + static_cast<uint32_t>(rng() % 150);
      const uint64_t pos = rng() % 200;
      std::vector<uint64_t> words((pos + uint64_t{c} * k + 63) / 64 + 2);
      // All ones, all zeros or random: the extremes are the carries' test.
      const int fill = trial % 3;
      for (uint64_t& w : words)
        w = fill == 0 ? ~uint64_t{0} : fill == 1 ? 0 : rng();
      uint64_t want = 0;
      for (uint32_t i = 0; i < c; ++i)
        want += FieldAt(words, pos + uint64_t{i} * k, k);
      ASSERT_EQ(summer.Sum(words.data(), pos, c), want)
          << "k=" << k << " pos=" << pos << " c=" << c;
    }
  }
}

// OrBits copies exactly the source's bits into the zero destination bits
// and leaves every other destination bit as it was, for any two alignments
// and lengths from none to several words.
TEST(OrBitsTest, CopiesTheBitsAndNothingElse) {
  std::mt19937_64 rng(64);
  for (int trial = 0; trial < 20000; ++trial) {
    const uint64_t len = rng() % 400;
    const uint64_t src_pos = rng() % 130, dst_pos = rng() % 130;
    std::vector<uint64_t> src((src_pos + len + 63) / 64 + 2);
    for (uint64_t& w : src) w = rng();
    std::vector<uint64_t> dst((dst_pos + len + 63) / 64 + 2);
    for (uint64_t& w : dst) w = rng();
    auto bit = [](const std::vector<uint64_t>& w, uint64_t i) {
      return (w[i >> 6] >> (i & 63)) & 1;
    };
    for (uint64_t i = dst_pos; i < dst_pos + len; ++i) {
      dst[i >> 6] &= ~(uint64_t{1} << (i & 63));
    }
    const std::vector<uint64_t> before = dst;
    OrBits(src.data(), src_pos, len, dst.data(), dst_pos);
    for (uint64_t i = 0; i < dst.size() * 64; ++i) {
      const bool inside = i >= dst_pos && i < dst_pos + len;
      ASSERT_EQ(bit(dst, i),
                inside ? bit(src, src_pos + (i - dst_pos)) : bit(before, i))
          << "len=" << len << " src_pos=" << src_pos << " dst_pos=" << dst_pos
          << " bit " << i;
    }
  }
}

}  // namespace
}  // namespace exposure_filter
