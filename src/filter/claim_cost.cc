#include "src/filter/claim_cost.h"

#include <cstdint>

#include "src/filter/claim_bitmap.h"
#include "src/filter/claim_index.h"
#include "src/filter/claim_probe.h"

namespace exposure_filter {
namespace {

// The header's constants, in tenths of a ns (integers: no rounding to
// reason about; n, m < 2^32 and 2^E <= 2^16 keep every sum below 2^60).
constexpr uint64_t kBitmapPerCode = 55;
constexpr uint64_t kBitmapPerPass = 10;   // per candidate and pass
constexpr uint64_t kBitmapPerProbe = 13;  // per candidate and run
constexpr uint64_t kIndexPerCode = 140;
constexpr uint64_t kIndexPerBucket = 7;  // 0.75 ns, rounded down
// The portable probe (also an index filed earlier, which later checks find
// out of cache), and the vector kernel probing the index just built.
constexpr uint64_t kIndexPerCandidate = 36;
constexpr uint64_t kIndexPerCandidateVector = 15;

// Per candidate, probing the index RemoveClaimedByRuns would build now.
uint64_t BuiltIndexPerCandidate() {
  static const uint64_t cost = ActiveClaimProbe() == &ProbeClaimsAvx512
                                   ? kIndexPerCandidateVector
                                   : kIndexPerCandidate;
  return cost;
}

// ClaimBitmap's estimated cost for m candidates; max when it cannot take
// the runs.
uint64_t BitmapCost(absl::Span<const FingerprintRunView> runs, size_t m,
                    uint64_t* codes) {
  uint64_t n = 0;
  uint64_t nonempty = 0;
  for (const FingerprintRunView& r : runs) {
    n += r.count();
    nonempty += r.count() != 0;
  }
  *codes = n;
  if (!ClaimBitmap::Fits(runs)) return UINT64_MAX;
  const uint64_t passes = ClaimBitmap::Passes(runs);
  return kBitmapPerCode * n +
         uint64_t{m} * (kBitmapPerPass * passes + kBitmapPerProbe * nonempty);
}

}  // namespace

bool BitmapCheaperThanIndex(absl::Span<const FingerprintRunView> runs,
                            size_t m) {
  uint64_t n = 0;
  const uint64_t bitmap = BitmapCost(runs, m, &n);
  const uint64_t index =
      kIndexPerCode * n +
      (kIndexPerBucket << ClaimIndex::BucketBits(static_cast<size_t>(n))) +
      BuiltIndexPerCandidate() * uint64_t{m};
  return bitmap < index;
}

bool BitmapCheaperThanProbe(absl::Span<const FingerprintRunView> runs,
                            size_t m) {
  uint64_t n = 0;
  return BitmapCost(runs, m, &n) < kIndexPerCandidate * uint64_t{m};
}

}  // namespace exposure_filter
