// Run sets and candidates for the exact checks of many candidates against a
// user's runs (ClaimIndex, ClaimBitmap, RemoveClaimedByRuns): the runs of
// given geometries, candidates that hit them, sit on the edges of codes'
// claimed prefix ranges, or miss, and what keep[] must be afterwards.
#ifndef EXPOSURE_FILTER_TESTS_FILTER_CLAIM_RUNS_H_
#define EXPOSURE_FILTER_TESTS_FILTER_CLAIM_RUNS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "exposure_filter/item_hash.h"
#include "src/filter/fingerprint_run.h"

namespace exposure_filter::testing {

struct RunSpec {
  size_t n;
  int b;
  uint64_t u;
};

inline std::vector<uint64_t> Hashes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> h(n);
  for (uint64_t& x : h) x = HashItemId(rng());
  return h;
}

// The runs of `specs` (items of run r seeded by r) and their items.
struct RunSet {
  std::vector<FingerprintRun> runs;
  std::vector<uint64_t> items;
  std::vector<FingerprintRunView> views() const {
    std::vector<FingerprintRunView> v;
    for (const FingerprintRun& r : runs) v.push_back(r.view());
    return v;
  }
};

// One run per slice of a user whose exposures spread over six slices.
inline std::vector<RunSpec> OneRunPerSlice() {
  return {{284, 17, 1 << 17}, {285, 19, 1 << 19}, {286, 19, 1 << 19},
          {286, 19, 1 << 19}, {286, 19, 1 << 19}, {572, 19, 1 << 19}};
}

inline RunSet MakeRuns(const std::vector<RunSpec>& specs, uint64_t seed) {
  RunSet s;
  for (size_t r = 0; r < specs.size(); ++r) {
    const std::vector<uint64_t> items = Hashes(specs[r].n, seed * 100 + r);
    absl::StatusOr<FingerprintRun> run =
        FingerprintRun::Build(items, specs[r].b, specs[r].u);
    EXPECT_TRUE(run.ok()) << run.status();
    s.runs.push_back(*std::move(run));
    s.items.insert(s.items.end(), items.begin(), items.end());
  }
  return s;
}

// m candidates: every other one a recorded item, duplicates, and for some
// codes the first and last hash of the fingerprint and their neighbours
// outside it (the edges of the bucket range a code is filed under).
inline std::vector<uint64_t> Candidates(const RunSet& s, size_t m,
                                        uint64_t seed) {
  std::vector<uint64_t> c = Hashes(m, seed);
  for (size_t i = 0; i < m && !s.items.empty(); i += 2) {
    c[i] = s.items[(i * 7919) % s.items.size()];
  }
  for (size_t i = 3; i < m; i += 11) c[i] = c[i - 3];
  for (size_t i = 1, r = 0; i + 3 < m && !s.runs.empty(); i += 9, ++r) {
    const FingerprintRun& run = s.runs[r % s.runs.size()];
    const std::vector<uint32_t> fps = run.Fingerprints();
    if (fps.empty()) continue;
    const uint64_t f = fps[(i * 31) % fps.size()];
    const int b = run.precision();
    const uint64_t u = run.universe();
    // First b-bit prefix p with floor(p u / 2^b) = f, and of f + 1.
    const uint64_t p = static_cast<uint64_t>(
        ((static_cast<unsigned __int128>(f) << b) + u - 1) / u);
    const uint64_t p_end = static_cast<uint64_t>(
        ((static_cast<unsigned __int128>(f + 1) << b) + u - 1) / u);
    const uint64_t low = (uint64_t{1} << (64 - b)) - 1;  // b <= 32
    c[i] = p << (64 - b);
    if (p > 0) c[i + 1] = (p << (64 - b)) - 1;
    c[i + 2] = ((p_end - 1) << (64 - b)) | low;
    if (p_end < (uint64_t{1} << b)) c[i + 3] = p_end << (64 - b);
  }
  return c;
}

// keep[] for `cands` with every 13th already cleared (a check must leave
// those at 0), and in *expected what must be left: cleared where some run
// of `s` contains the candidate (FingerprintRun::Contains). Returns how many
// candidates some run contains.
inline size_t InitialAndExpected(const RunSet& s,
                                 const std::vector<uint64_t>& cands,
                                 std::vector<uint8_t>* keep,
                                 std::vector<uint8_t>* expected) {
  keep->assign(cands.size(), 1);
  for (size_t i = 0; i < keep->size(); i += 13) (*keep)[i] = 0;
  *expected = *keep;
  size_t members = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    for (const FingerprintRun& r : s.runs) {
      if (r.Contains(cands[i])) {
        (*expected)[i] = 0;
        ++members;
        break;
      }
    }
  }
  return members;
}

}  // namespace exposure_filter::testing

#endif  // EXPOSURE_FILTER_TESTS_FILTER_CLAIM_RUNS_H_
