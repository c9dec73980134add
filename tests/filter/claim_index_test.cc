// ClaimIndex (FilterRecalled's hash join of a user's codes and the
// candidates) must clear exactly the candidates some run contains, for the
// run sets users have (one run per slice, power-of-two universes) and the
// ones the format allows (non-power-of-two universes, b = 32 with U = 2^32
// and 2^32 - 1, precisions below the bucket bits, empty and one-code runs),
// and refuse the run sets whose filings would pass its bound; UserFilter
// then takes the other direction with the same result.
#include "src/filter/claim_index.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/filter/claim_probe.h"
#include "src/filter/filter_policy.h"
#include "src/filter/fingerprint_run.h"
#include "src/filter/probe_kernel.h"
#include "src/filter/user_filter.h"
#include "tests/filter/claim_runs.h"

namespace exposure_filter {
namespace {

using testing::Candidates;
using testing::Hashes;
using testing::InitialAndExpected;
using testing::MakeRuns;
using testing::OneRunPerSlice;
using testing::RunSet;
using testing::RunSpec;

// keep with every 13th candidate already cleared, and what must be left:
// through RemoveClaimed (the kernel for this CPU), and through each probe
// kernel this CPU can run, whichever is active.
void ExpectExact(const RunSet& s, const ClaimIndex& index,
                 const std::vector<uint64_t>& cands, const char* what) {
  std::vector<uint8_t> initial, expected;
  const size_t members = InitialAndExpected(s, cands, &initial, &expected);
  if (cands.size() >= 300) {
    ASSERT_GT(members, cands.size() / 4) << what;  // the check has teeth
  }
  std::vector<uint8_t> keep = initial;
  index.RemoveClaimed(cands, keep.data());
  ASSERT_EQ(keep, expected) << what << " m=" << cands.size();
  if (index.filings() == 0) return;
  std::vector<std::pair<const char*, ClaimProbeFn>> kernels = {
      {"portable", ProbeClaimsPortable}};
  if (Avx512BwVlSupported()) {
    kernels.push_back({"avx512", ProbeClaimsAvx512});
  }
  for (const auto& [name, probe] : kernels) {
    keep = initial;
    probe(index.filed(), cands.data(), cands.size(), keep.data());
    ASSERT_EQ(keep, expected) << what << " m=" << cands.size() << " " << name;
  }
}

TEST(ClaimIndexTest, ClearsExactlyWhatSomeRunContains) {
  const std::vector<std::pair<const char*, std::vector<RunSpec>>> sets = {
      {"one run per slice (a spread user's)", OneRunPerSlice()},
      {"universes other than 2^b, b = 32 at U = 2^32 and 2^32 - 1",
       {{2000, 32, 200'003},
        {700, 32, (uint64_t{1} << 32) - 1},
        {300, 32, uint64_t{1} << 32},
        {50, 24, 5'000'011},
        {400, 20, 1 << 17}}},  // a power of two below 2^b: not a prefix
      {"one code, an empty run, precision below the bucket bits",
       {{1, 20, 1 << 20}, {0, 20, 1 << 20}, {3, 5, 27}, {40, 12, 4000}}},
      {"a heavy user (50,000 codes: the bucket bits' cap)",
       {{50'000, 32, 5'000'000}, {20, 26, 1 << 26}}},
  };
  ClaimIndex index;  // reused across builds, as per thread in the server
  for (const auto& [what, specs] : sets) {
    const RunSet s = MakeRuns(specs, 7);
    ASSERT_TRUE(index.Build(s.views())) << what;
    size_t codes = 0;
    for (const FingerprintRun& r : s.runs) codes += r.count();
    EXPECT_GE(index.filings(), codes) << what;  // every code filed
    for (size_t m : {1, 2, 300, 5000}) {
      ExpectExact(s, index, Candidates(s, m, m + codes), what);
    }
    // Lengths around the vector kernel's 16 lanes: its tail goes through
    // the portable loop.
    for (size_t m : {15, 16, 17, 31, 33}) {
      ExpectExact(s, index, Candidates(s, m, m + codes), what);
    }
  }
}

// A heavy user's index is released after use (Trim), a light one's kept
// for the next request; a trimmed index builds again.
TEST(ClaimIndexTest, TrimReleasesOnlyAHeavyUsersBuffers) {
  ClaimIndex index;
  const RunSet light = MakeRuns({{2000, 19, 1 << 19}}, 21);
  ASSERT_TRUE(index.Build(light.views()));
  const size_t light_bytes = index.retained_bytes();
  index.Trim();
  EXPECT_EQ(index.retained_bytes(), light_bytes);
  const RunSet heavy = MakeRuns({{200'000, 32, 20'000'000}}, 22);
  ASSERT_TRUE(index.Build(heavy.views()));
  EXPECT_GT(index.retained_bytes(), 200'000 * sizeof(ClaimIndex::Entry));
  index.Trim();
  EXPECT_LT(index.retained_bytes(), 300'000);  // the 2^16 + 2 starts stay
  ASSERT_TRUE(index.Build(light.views()));
  ExpectExact(light, index, Candidates(light, 300, 23), "after a trim");
}

TEST(ClaimIndexTest, NoRunsClearNothing) {
  ClaimIndex index;
  ASSERT_TRUE(index.Build({}));
  std::vector<uint8_t> keep(100, 1);
  index.RemoveClaimed(Hashes(100, 3), keep.data());
  EXPECT_EQ(keep, std::vector<uint8_t>(100, 1));
}

// Codes of tiny universes file under many buckets each (2^(E - b) for a
// run of precision b below the bucket bits E): past ClaimIndex's bound
// Build refuses, and UserFilter::RemoveExposed (which then buckets the
// candidates instead) still clears exactly the claimed ones. A valid
// filter gets there only at a large delta with many tiny runs: here
// delta = 0.5, 2,000 codes at U = 2^19 and 100 one-code runs at b = 8
// (F = 0.4).
TEST(ClaimIndexTest, RefusesTinyUniversesAndUserFilterFallsBack) {
  std::vector<RunSpec> specs = {{2000, 19, 1 << 19}};
  for (int r = 0; r < 100; ++r) specs.push_back({1, 8, 256});
  const RunSet s = MakeRuns(specs, 11);
  ClaimIndex index;
  EXPECT_FALSE(index.Build(s.views()));

  FilterPolicyOptions options;
  options.fp_rate = 0.5;
  absl::StatusOr<FilterPolicy> policy = FilterPolicy::Create(options);
  ASSERT_TRUE(policy.ok()) << policy.status();
  constexpr int64_t kNowMs = 1795392000000LL;
  const int64_t slice = policy->SliceIndexOf(kNowMs);
  FilterParts parts;
  for (int j = 0; j < 2; ++j) {
    SlicePart part;
    part.index = slice - 1 + j;
    part.min_event_ms = policy->SliceStartMs(part.index);
    part.max_event_ms = part.min_event_ms;
    for (size_t r = j == 0 ? 0 : 1; r < (j == 0 ? 1 : s.runs.size()); ++r) {
      RunPart run;
      absl::StatusOr<FingerprintRun> copy =
          FingerprintRun::CopyOf(s.runs[r].view());
      ASSERT_TRUE(copy.ok()) << copy.status();
      run.run = *std::move(copy);
      run.capacity = run.run.count();
      part.runs.push_back(std::move(run));
    }
    parts.slices.push_back(std::move(part));
  }
  absl::StatusOr<UserFilter> f =
      UserFilter::FromParts(*policy, std::move(parts), "k");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::vector<uint64_t> cands = Candidates(s, 5000, 12);
  std::vector<uint8_t> keep(cands.size(), 1);
  f->RemoveExposed(*policy, kNowMs, cands, keep.data());
  size_t cleared = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    bool claimed = false;
    for (const FingerprintRun& r : s.runs) claimed |= r.Contains(cands[i]);
    ASSERT_EQ(keep[i], claimed ? 0 : 1) << "candidate " << i;
    cleared += !keep[i];
  }
  EXPECT_GT(cleared, cands.size() / 4);
}

}  // namespace
}  // namespace exposure_filter
