// Rice code length model: rice_model.h.
#include "src/filter/rice_model.h"

#include <algorithm>
#include <cmath>

namespace exposure_filter {

// Expected Rice code length of n distinct fingerprints uniform in [0, u) at
// parameter k: n (k + 1) remainder and stop bits, and per gap (geometric,
// mean mu = (u - n) / n) a unary quotient of mean 1 / (e^(2^k / mu) - 1)
// (fingerprint_run.h). The tables store payload bits as the difference to
// it: a few units (the quotients' rounding, about sqrt(n / 12), and the
// last gap) instead of 2-3 varint bytes.
double ModelRiceBits(uint64_t n, uint64_t u, int k) {
  const double nd = static_cast<double>(n);
  const double mean = static_cast<double>(u - n) / nd;
  double bits = nd * (k + 1);
  // 2^k as an integer's double (exact, k <= 31): std::ldexp's value
  // without the libm call, as below.
  if (mean > 0) {
    bits += nd / std::expm1(static_cast<double>(uint64_t{1} << k) / mean);
  }
  return bits;
}
int64_t ExpectedRiceBits(uint64_t n, uint64_t u, int k) {
  return std::llround(ModelRiceBits(n, u, k));
}
// The k the model prefers: the tables store k as the difference to it, 0 in
// the common case (RiceCode::Choose tries k0 - 1 .. k0 + 1 on the real gaps
// and mostly agrees). Closed form, because every Decode of the tables calls
// this once per run (each write and each lookup; with the model evaluated
// at three k it was ~40% of RecordExposure's CPU, in expm1). With x = 2^k /
// mu, ModelRiceBits(k + 1) - ModelRiceBits(k) = n (1 - 1 / (2 sinh x)),
// since 1/(e^2x - 1) - 1/(e^x - 1) = -1 / (2 sinh x): k + 1 is cheaper
// exactly while sinh x < 1/2, i.e. x < asinh(1/2) = ln phi (phi the golden
// ratio). The differences grow with k (the model is convex in k), so the
// best k is the smallest with 2^k >= mu ln phi: ceil(log2(mu ln phi)),
// within [0, 31]. (tests/filter/rice_model_test.cc checks it against the
// model's minimum over every k.)
int CanonicalRiceK(uint64_t n, uint64_t u) {
  if (n == 0 || u <= n) return 0;
  constexpr double kLnPhi = 0.48121182505960344;  // asinh(1/2)
  const double mu_ln_phi =
      static_cast<double>(u - n) / static_cast<double>(n) * kLnPhi;
  if (mu_ln_phi <= 1) return 0;
  // ilogb = floor(log2), exact; k = ceil(log2(mu ln phi)).
  // mu ln phi < 2^32 (u <= 2^32): 0 <= k <= 31, 2^k an exact double.
  int k = std::ilogb(mu_ln_phi);
  if (static_cast<double>(uint64_t{1} << k) < mu_ln_phi) ++k;
  return std::min(k, 31);
}

}  // namespace exposure_filter
