// ClaimBitmap: the codes of a user's runs as bit sets over their universes,
// for checking many candidates against runs of small universes.
//
// Code f of a run (b, U) claims exactly the hashes h with fp(h) = floor(P U
// / 2^b) = f, P = h >> (64 - b) (fingerprint_run.h). With bit f of a U-bit
// set standing for code f, a candidate's check against the run is that
// multiply-shift and one bit test: no interval, no bucket, exact by
// definition. The runs' sets lie side by side in one bitmap (run r's at
// offset U_0 + ... + U_(r-1)), filled from the decoded codes, probed once
// per candidate and run, and cleared again from the same codes: a call
// costs O(n + m R) for n codes in R runs whatever the U are (no memset of
// U / 8 bytes). The universes bound only the memory the bitmap holds and
// the cache lines a probe may touch: a sealed run's U is about n / 0.0014
// (2,450 codes at U = 1.75M: 219 KB, a core's L2 holds it); runs whose
// universes sum past kMaxBits are taken in batches, one bitmap's worth at
// a time.
//
// Against ClaimIndex (claim_index.h) it saves the per-code interval
// arithmetic, the counting sort and the prefix sum over 2^E buckets, and a
// probe is branch-free, but it pays one probe per candidate per run:
// RemoveClaimedByRuns weighs the two (claim_cost.h).
#ifndef EXPOSURE_FILTER_SRC_FILTER_CLAIM_BITMAP_H_
#define EXPOSURE_FILTER_SRC_FILTER_CLAIM_BITMAP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "src/filter/fingerprint_run.h"

namespace exposure_filter {

class ClaimBitmap {
 public:
  // The bits one batch of runs may take, their universes summed: 2^22, 512
  // KiB per thread, kept between calls (a third of what ClaimIndex may keep
  // per thread: 2^16 codes' entries, intervals, codes and starts, ~1.5
  // MiB). Runs past that are checked in several batches, each set, probed
  // and cleared in turn.
  static constexpr uint64_t kMaxBits = uint64_t{1} << 22;
  // Runs probed per pass over the candidates (each pass unrolled).
  static constexpr size_t kRunsPerPass = 4;

  // Whether every non-empty run of `runs` has a universe of at most
  // kMaxBits, so that the bitmap can take them.
  static bool Fits(absl::Span<const FingerprintRunView> runs);
  // Passes over the candidates RemoveClaimed makes for `runs` (fitting).
  static size_t Passes(absl::Span<const FingerprintRunView> runs);

  // Clears keep[i] for every hashes[i] that one of `runs` contains (keep[i]
  // == 0 on entry stays 0), as FingerprintRunView::Contains over every run
  // would. Needs Fits(runs) (else the bitmap grows past kMaxBits: still
  // exact). No allocation once grown.
  void RemoveClaimed(absl::Span<const FingerprintRunView> runs,
                     absl::Span<const uint64_t> hashes, uint8_t* keep);

  // Releases the code scratch if it holds more than kKeepCodes codes, as
  // ClaimIndex::Trim (the bitmap itself is bounded by kMaxBits).
  static constexpr size_t kKeepCodes = size_t{1} << 16;
  void Trim();
  // Heap bytes the buffers hold (capacity, not size).
  size_t retained_bytes() const;

  // What a probe computes per run: the run's set's offset plus the
  // candidate's fingerprint, mulhi(h & mask, U) (see claim_bitmap.cc).
  struct Probe {
    uint64_t mask;
    uint64_t universe;
    uint64_t offset;
  };

 private:
  // The end of the batch of runs from `begin`: consecutive runs whose
  // universes sum to at most kMaxBits (at least one non-empty run).
  static size_t BatchEnd(absl::Span<const FingerprintRunView> runs,
                         size_t begin);
  // RemoveClaimed for one batch.
  void RemoveClaimedBatch(absl::Span<const FingerprintRunView> runs,
                          absl::Span<const uint64_t> hashes, uint8_t* keep);

  std::vector<uint32_t> fps_;   // the runs' codes, offset (scratch)
  std::vector<uint64_t> bits_;  // all zero between calls
  std::vector<Probe> probes_;   // one per non-empty run (scratch)
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_CLAIM_BITMAP_H_
