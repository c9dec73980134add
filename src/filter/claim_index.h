// ClaimIndex: the codes of a user's live runs, filed by the hash prefixes
// they claim, so that FilterRecalled checks each candidate where it lies.
//
// A run's fingerprint is a monotone function of a hash's top b bits
// (fingerprint_run.h): code f of a run (b, U) claims exactly the hashes
// whose fingerprint is f, and those share a short range of top-E-bit
// prefixes (FingerprintRunView::RemoveContained has the bounds). The index
// files every code of every run under each E-bit prefix ("bucket") of its
// range: a hash join whose build side is the user's n codes and whose probe
// side is the request's m candidates, read in order. Against the other
// direction (bucket the m candidates, walk each run's codes against the
// buckets: FingerprintRunView::RemoveContained), the candidates are neither
// scattered nor re-read at random, keep[] is written in order, and the
// scatter moves n entries instead of m (a FilterRecalled of 5,000
// candidates against a 2,000-item user: 2,000 instead of 5,000).
//
// Sizing. With 2^E >= 4n buckets (E = bit_width(n) + 2, at most kMaxBits)
// a bucket holds lambda <= 1/4 codes on average plus the few codes whose
// range straddles a bucket edge, so a probe makes one fixed check and
// loops only past it (a candidate's bucket holds another code beside its
// own with P(Poisson(1/4) >= 1) = 22%, two or more with 2.6%; a fixed
// second check measured slower: bench/fingerprint_run_bench
// BM_ClaimIndex). A code of a run with U >= 2^E spans one or two
// buckets; of a run with b < E, 2^(E - b) at least. Filing is bounded:
// a run files at most n_r + n_r 2^E / U_r entries (each code one bucket
// plus the buckets its prefix range covers), and Build refuses (returns
// false) past kMaxFilingsPerCode n + 2^E entries, for a caller to take the
// other direction (runs of tiny universes are legal but rare).
#ifndef EXPOSURE_FILTER_SRC_FILTER_CLAIM_INDEX_H_
#define EXPOSURE_FILTER_SRC_FILTER_CLAIM_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "src/filter/claim_probe.h"
#include "src/filter/fingerprint_run.h"

namespace exposure_filter {

class ClaimIndex {
 public:
  static constexpr int kMaxBits = 16;  // 2^16 bucket starts: 256 KiB
  static constexpr size_t kMaxFilingsPerCode = 4;

  // Files every code of `runs` (views valid during the call). False when
  // the filing bound above would be passed; the index is then unusable
  // until the next Build. Reuses its buffers: no allocation once grown.
  bool Build(absl::Span<const FingerprintRunView> runs);
  // Clears keep[i] for every hash[i] that some filed code claims
  // (keep[i] == 0 on entry stays 0). Exact: the same result as
  // FingerprintRunView::RemoveContained over every run. Through the probe
  // kernel for this CPU (claim_probe.h).
  void RemoveClaimed(absl::Span<const uint64_t> hashes, uint8_t* keep) const;
  // The filed codes as the probe kernels read them, after a successful
  // Build with filings() > 0; valid until the next Build or Trim.
  FiledClaims filed() const;

  // Releases the entries if they hold more than kKeepCodes codes' worth,
  // so that one heavy user does not pin its index in every thread that
  // once checked it (the index is empty until the next Build). Build's
  // scratch is per thread and released the same way by Build itself.
  static constexpr size_t kKeepCodes = size_t{1} << 16;
  void Trim();
  // Heap bytes the buffers hold (capacity, not size).
  size_t retained_bytes() const;

  // The bucket bits E a Build of n codes uses: bit_width(n) + 2, at most
  // kMaxBits.
  static int BucketBits(size_t n);

  // Entries filed by the last successful Build (for tests and benches).
  size_t filings() const { return filings_; }
  int bucket_bits() const { return bits_; }

  // A filed code (claim_probe.h): the hashes whose top 32 bits lie in
  // [first, first + width].
  using Entry = FiledClaim;

 private:
  static constexpr size_t kPadding = 1;  // a probe reads one entry past

  std::vector<uint32_t> start_;  // 2^bits + 1 bucket starts
  std::vector<Entry> entries_;   // filed codes, bucket by bucket
  size_t filings_ = 0;
  int bits_ = 0;
};

// Clears keep[i] for every hashes[i] that one of `runs` contains (keep[i]
// == 0 on entry stays 0), through a per-thread ClaimBitmap where it fits
// and is estimated cheaper (claim_cost.h: few runs of small universes, a
// user's usual shape), else a per-thread ClaimIndex; where Build refuses,
// the other direction: the candidates still kept are grouped by their top
// bits (CandidateSorter::Bucket) and each run walks its codes against them
// (FingerprintRunView::RemoveContained). Same result every way. The
// server's FilterRecalled (UserFilter::RemoveExposed) and the client's
// FilterView both check runs through it.
void RemoveClaimedByRuns(absl::Span<const FingerprintRunView> runs,
                         absl::Span<const uint64_t> hashes, uint8_t* keep);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_CLAIM_INDEX_H_
