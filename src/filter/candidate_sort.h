// Arranging a batch of candidates once for every FingerprintRun they meet.
//
// A run's fingerprint (fingerprint_run.h) is a monotone function of the
// hash's top 32 bits, so candidates ordered by those bits are in fingerprint
// order for every run of every (b, U) at once. FilterRecalled only groups
// them by their top bits (CandidateSorter::Bucket) and each run checks a
// code's bucket; writes and FilterView sort them (SortKeysByHashPrefix) and
// merge.
#ifndef EXPOSURE_FILTER_SRC_FILTER_CANDIDATE_SORT_H_
#define EXPOSURE_FILTER_SRC_FILTER_CANDIDATE_SORT_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace exposure_filter {

// Sorts FingerprintRun::SortKey()s by their top 32 bits, stably (keys with
// equal top bits keep their order): one counting pass into ~m / 2 buckets by
// the top bits and an insertion pass, O(m) expected (candidate_sort.cc has
// the math; 5,000 keys: bench/fingerprint_run_bench BM_SortKeys), O(m)
// worst case through an LSD radix fallback. `scratch` is resized to
// keys.size(); reuse it across calls.
void SortKeysByHashPrefix(absl::Span<uint64_t> keys,
                          std::vector<uint64_t>& scratch);

// Candidates grouped by the top `bucket_bits` bits of their hash (buckets
// in ascending order, any order inside a bucket: one counting pass, no
// sort), with where each bucket starts. A run looks a fingerprint's
// possible candidates up there in O(1) (FingerprintRunView::
// RemoveContained); no order inside a bucket is needed because every
// candidate of the bucket is checked.
struct BucketedCandidates {
  // The keys (FingerprintRun::SortKey), then kPadding readable zero keys so
  // a fixed-width check may read past the last bucket.
  static constexpr size_t kPadding = 8;
  const uint64_t* keys = nullptr;
  size_t size = 0;
  int bucket_bits = 0;
  // 2^bucket_bits + 1 entries: bucket j is [bucket_start[j],
  // bucket_start[j + 1]); bucket_start[2^bits] = size.
  const uint32_t* bucket_start = nullptr;
};

// Owns the scratch of the bucket pass; one per thread, reused for every
// request (no allocation once grown).
class CandidateSorter {
 public:
  // Groups `keys` into ~m buckets (2^B with B = bit_width(m) - 1, so
  // lambda = m / 2^B in [1, 2) keys per bucket; at most 2^14 buckets).
  // The result is valid until the next call.
  BucketedCandidates Bucket(absl::Span<const uint64_t> keys);

 private:
  std::vector<uint64_t> bucketed_;
  std::vector<uint32_t> bucket_start_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_CANDIDATE_SORT_H_
