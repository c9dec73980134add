// Measuring a false-positive rate with never-recorded probes, sized so the
// measurement can tell a budget from a multiple of it (fp_budget_test.cc has
// the derivation of the probe count and of the bound).
#ifndef EXPOSURE_FILTER_TESTS_FILTER_FP_MEASUREMENT_H_
#define EXPOSURE_FILTER_TESTS_FILTER_FP_MEASUREMENT_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "exposure_filter/item_hash.h"

namespace exposure_filter {

// Recorded ids have the top bit clear, probe ids have it set: the two sets
// are disjoint, so every probe a filter claims is a false positive.
inline std::vector<uint64_t> RecordedHashes(std::mt19937_64& rng, size_t n) {
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) x = HashItemId(rng() >> 1);
  return h;
}
inline uint64_t FreshHash(std::mt19937_64& rng) {
  return HashItemId(rng() | (uint64_t{1} << 63));
}

struct FpMeasurement {
  uint64_t probes = 0;
  uint64_t hits = 0;
  double rate() const { return static_cast<double>(hits) / probes; }
  // "<hits> of <probes> fresh probes claimed (FP 1.23e-03 = 1.05x budget)".
  std::string Describe(double budget) const {
    return absl::StrFormat(
        "%d of %d never-recorded probes claimed: FP %.3e = %.3fx the budget "
        "%.3e",
        hits, probes, rate(), rate() / budget, budget);
  }
};

// Probes enough fresh items that `expected_hits_at_budget` of them would be
// claimed at exactly `budget`; `claims_batch(hashes, n, keep)` clears keep[i]
// for each claimed hash (the RemoveExposed shape; batches keep memory flat).
template <typename ClaimsBatch>
FpMeasurement MeasureFp(uint64_t seed, double budget,
                        double expected_hits_at_budget,
                        ClaimsBatch&& claims_batch) {
  std::mt19937_64 rng(seed);
  FpMeasurement m;
  m.probes = static_cast<uint64_t>(std::ceil(expected_hits_at_budget / budget));
  constexpr size_t kBatch = 1 << 16;
  std::vector<uint64_t> hashes(kBatch);
  std::vector<uint8_t> keep(kBatch);
  for (uint64_t done = 0; done < m.probes;) {
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(kBatch, m.probes - done));
    for (size_t i = 0; i < n; ++i) hashes[i] = FreshHash(rng);
    std::fill(keep.begin(), keep.begin() + n, 1);
    claims_batch(hashes.data(), n, keep.data());
    for (size_t i = 0; i < n; ++i) m.hits += keep[i] == 0;
    done += n;
  }
  return m;
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TESTS_FILTER_FP_MEASUREMENT_H_
