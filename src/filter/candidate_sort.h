// Sorting a batch of candidates once for every FingerprintRun they meet.
//
// A run's fingerprint (fingerprint_run.h) is a monotone function of the
// hash's top 32 bits, so candidates ordered by those bits are in fingerprint
// order for every run of every (b, U) at once: FilterRecalled sorts its
// candidates once per request and walks each slice's runs against them.
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

// Sorted keys with the index the sort's counting pass built for free: where
// each bucket of the top `bucket_bits` bits starts. A run looks a
// fingerprint's first possible candidate up there in O(1) instead of
// searching (FingerprintRunView::RemoveContained).
struct SortedCandidates {
  absl::Span<const uint64_t> keys;  // ascending by the top 32 bits
  int bucket_bits = 0;
  // 2^bucket_bits + 1 entries: bucket_start[j] is the first position whose
  // key's top bucket_bits bits are >= j (bucket_start[2^bits] = keys.size()).
  const uint32_t* bucket_start = nullptr;
};

// Owns the scratch of SortKeysByHashPrefix and of the bucket index; one per
// thread, reused for every request (no allocation once grown).
class CandidateSorter {
 public:
  // Sorts `keys` in place (as SortKeysByHashPrefix) and returns them with
  // their bucket index, valid until the next Sort or `keys` changes.
  SortedCandidates Sort(absl::Span<uint64_t> keys);

 private:
  std::vector<uint64_t> tmp_;
  std::vector<uint32_t> bucket_start_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_CANDIDATE_SORT_H_
