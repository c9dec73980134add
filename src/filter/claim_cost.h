// Which exact check RemoveClaimedByRuns takes for a request: the bit sets
// of ClaimBitmap or the hash join of ClaimIndex, by their estimated cost.
//
// Both decode the user's n codes. The index then computes each code's
// claimed interval (two 128-bit reciprocal divisions), counts, prefix-sums
// 2^E bucket starts (E = ClaimIndex::BucketBits(n)) and scatters, and a
// candidate's probe reads a bucket start and an entry; the bitmap sets and
// clears one bit per code, and a candidate's probe is one multiply and one
// bit test per run. So, in ns, with R the non-empty runs, m candidates and
// p = ClaimBitmap::Passes (one pass per four runs of a batch):
//
//   bitmap ~ 5.5 n + m (1.0 p + 1.3 R)
//   index  ~ 14 n + 0.75 2^E + c m,  c = 3.6, or 1.5 with the vector probe
//
// fitted (by hand, within about 10%) to bench/fingerprint_run_bench's
// BM_ClaimBitmap and BM_ClaimIndex/n/2 at m = 5,000 on a 2.5 GHz Xeon core
// (best of alternating runs on a shared machine): a user's usual sealed run
// plus open prefix run (2,497 codes, R = 2) 33 against 68 us; 2,000 codes
// in R = 7 runs 66 against 55 (in R = 4 runs the bitmap takes 41: the
// index's cost hardly depends on R); 333 codes in 7 runs 51 against 22;
// 20,000 codes in 7 runs (4 batches) 198 against 353. The AVX-512 probe
// (claim_probe.h, Intel cores) probes an index just built, still in cache,
// at 1.4-1.8 ns a candidate (BM_ClaimIndex/n/1 on an Intel Xeon with
// AVX-512, which puts the bitmap at 2,000 codes in 7 runs at 53-62 us
// against the index's 36-43 in interleaved runs): with c = 3.6 the model
// kept the feed's users (~2,400 codes in 6 runs) on the bitmap. An index
// filed earlier for later checks is out of cache by then (2-3 ns a
// candidate across 64 users, BM_ClaimIndexProbeAcrossUsers), so
// BitmapCheaperThanProbe keeps 3.6.
// The bitmap wins for few runs, the index for many runs of few codes each
// (its probe does not grow with R); the constants only place the crossing,
// both checks being exact.
#ifndef EXPOSURE_FILTER_SRC_FILTER_CLAIM_COST_H_
#define EXPOSURE_FILTER_SRC_FILTER_CLAIM_COST_H_

#include <cstddef>

#include "absl/types/span.h"
#include "src/filter/fingerprint_run.h"

namespace exposure_filter {

// True when ClaimBitmap can take `runs` (ClaimBitmap::Fits) and is
// estimated cheaper than ClaimIndex for m candidates.
bool BitmapCheaperThanIndex(absl::Span<const FingerprintRunView> runs,
                            size_t m);

// True when ClaimBitmap can take `runs` and is estimated cheaper for m
// candidates than the probe alone of a ClaimIndex already built (one
// filed once for many checks, FilterView::FileRuns): by the constants
// above, a user of one run of fewer than ~1.3 m / 5.5 codes (~1,200 at
// 5,000 candidates), whose bit set costs less to set than probing saves.
bool BitmapCheaperThanProbe(absl::Span<const FingerprintRunView> runs,
                            size_t m);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_CLAIM_COST_H_
