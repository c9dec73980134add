// The Rice code length model (src/filter/rice_model.h): CanonicalRiceK's
// closed form against the model it minimizes.
#include "src/filter/rice_model.h"

#include <cmath>
#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

// The model's minimum over every k, by evaluation. Where two k's model
// lengths are within rounding of each other (a tie the closed form may
// break either way), either is accepted.
void ExpectModelsBest(uint64_t n, uint64_t u) {
  const int k = CanonicalRiceK(n, u);
  ASSERT_GE(k, 0);
  ASSERT_LE(k, 31);
  const double at_k = ModelRiceBits(n, u, k);
  for (int other = 0; other <= 31; ++other) {
    const double at_other = ModelRiceBits(n, u, other);
    EXPECT_LE(at_k, at_other + 1e-9 * at_other)
        << "n=" << n << " u=" << u << " k=" << k << " beaten by " << other;
  }
}

TEST(RiceModelTest, CanonicalRiceKIsTheModelsBest) {
  // The shapes the tables hold: runs of 1..65,536 fingerprints in prefix
  // universes 2^17..2^32 and sealed ones (multiples of 256 and odd U).
  std::mt19937_64 rng(15);
  for (int i = 0; i < 20000; ++i) {
    const int b = 1 + static_cast<int>(rng() % 32);
    const uint64_t u_max = uint64_t{1} << b;
    const uint64_t u = 1 + rng() % u_max;
    const uint64_t n = 1 + rng() % std::min<uint64_t>(u, 1 << 16);
    ExpectModelsBest(n, u);
  }
  for (uint64_t n : {1, 2, 3, 20, 267, 340, 2000}) {
    for (int b = 0; b <= 32; ++b) {
      const uint64_t u = uint64_t{1} << b;
      if (u >= n) ExpectModelsBest(n, u);
      if (u > n + 1) ExpectModelsBest(n, u - 1);
    }
  }
}

// Around each step of k: the boundary 2^k = mu ln(phi), where the model's
// lengths at k and k + 1 are equal, the closed form moves from k to k + 1.
TEST(RiceModelTest, StepsWhereTheModelsLengthsCross) {
  const uint64_t n = 1000;
  for (int k = 1; k <= 20; ++k) {
    // mu = (u - n) / n at the boundary: u = n + n 2^k / ln(phi).
    const double u_cross = n + n * std::ldexp(1.0, k) / std::asinh(0.5);
    const uint64_t below = static_cast<uint64_t>(std::floor(u_cross)) - 2;
    const uint64_t above = static_cast<uint64_t>(std::ceil(u_cross)) + 2;
    EXPECT_EQ(CanonicalRiceK(n, below), k) << "u=" << below;
    EXPECT_EQ(CanonicalRiceK(n, above), k + 1) << "u=" << above;
    ExpectModelsBest(n, below);
    ExpectModelsBest(n, above);
  }
}

TEST(RiceModelTest, FullAndEmptyRunsTakeZero) {
  EXPECT_EQ(CanonicalRiceK(0, 1 << 20), 0);
  EXPECT_EQ(CanonicalRiceK(5, 5), 0);
  EXPECT_EQ(CanonicalRiceK(1, 1), 0);
  // One fingerprint in 2^32: mu ln(phi) ~ 2^30.9, k = 31.
  EXPECT_EQ(CanonicalRiceK(1, uint64_t{1} << 32), 31);
}

}  // namespace
}  // namespace exposure_filter
