#include "src/filter/candidate_sort.h"

#include <algorithm>

#include "absl/numeric/bits.h"

namespace exposure_filter {
namespace {

// The LSD radix sort: bits 32..42, 43..53, 54..63, stable, O(m) for any
// input. The fallback when the bucket pass below meets a crowded bucket.
void LsdRadixSort(absl::Span<uint64_t> keys, std::vector<uint64_t>& scratch) {
  // 2,048 buckets keep the three histograms (24 KiB) in L1.
  constexpr int kPasses = 3;
  constexpr int kShift[kPasses] = {32, 43, 54};
  constexpr uint64_t kMask[kPasses] = {2047, 2047, 1023};
  uint32_t count[kPasses][2048] = {};
  for (uint64_t k : keys) {
    for (int p = 0; p < kPasses; ++p) ++count[p][(k >> kShift[p]) & kMask[p]];
  }
  scratch.resize(keys.size());
  uint64_t* src = keys.data();
  uint64_t* dst = scratch.data();
  for (int p = 0; p < kPasses; ++p) {
    uint32_t sum = 0;
    for (uint32_t& c : count[p]) {
      const uint32_t here = c;
      c = sum;
      sum += here;
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint64_t k = src[i];
      dst[count[p][(k >> kShift[p]) & kMask[p]]++] = k;
    }
    std::swap(src, dst);
  }
  // An odd number of passes leaves the result in scratch.
  std::copy(src, src + keys.size(), keys.data());
}

constexpr int kMinBucketBits = 4;
constexpr int kMaxBucketBits = 12;  // 2^12 counters = 16 KiB: L1

// 2^B ~= m / 2 buckets (B = bit_width(m) - 2; 5,000 keys: 2^11 = 2,048
// buckets, lambda = 2.4 keys each).
int BucketBits(size_t m) {
  return std::clamp(
      static_cast<int>(absl::bit_width(static_cast<uint64_t>(m))) - 2,
      kMinBucketBits, kMaxBucketBits);
}

// Sorts `keys` (m >= 2); `start` has 2^bits + 2 entries and ends holding the
// bucket starts (as BucketedCandidates::bucket_start) in its first
// 2^bits + 1.
//
// One MSD counting pass on the top B bits, then one insertion-sort pass
// finishes the buckets: keys only move inside their bucket, so it is the
// per-bucket sort without walking the bucket bounds. The hashes are
// uniform, a bucket's size s is ~Poisson(lambda), and the insertion pass
// makes E[s (s - 1) / 4] = lambda^2 / 4 moves per bucket, lambda / 4 ~= 0.6
// per key: about 2.6 passes over the keys in all, against the LSD sort's 4
// (and its 3 x 2,048-entry prefix sums). Equal keys (a candidate listed
// twice) never move past each other. Ids a client chose can crowd one
// bucket (the hash is public): past kMovesPerKey * m moves (~7x the
// expectation) the pass gives up and the O(m) LSD sort takes the bucketed
// keys, so such input costs at most ~twice, never m^2.
void BucketSort(absl::Span<uint64_t> keys, std::vector<uint64_t>& scratch,
                int bits, uint32_t* start) {
  constexpr size_t kMovesPerKey = 4;
  const size_t m = keys.size();
  const size_t buckets = size_t{1} << bits;
  const int shift = 64 - bits;
  // Counted two places up: after the prefix sum start[j + 1] is where
  // bucket j starts, the scatter moves it to where j ends (= j + 1 starts),
  // which leaves start[j] = the start of bucket j for every j.
  std::fill(start, start + buckets + 2, 0u);
  for (uint64_t k : keys) ++start[(k >> shift) + 2];
  for (size_t j = 2; j < buckets + 2; ++j) start[j] += start[j - 1];
  scratch.resize(m);
  uint64_t* bucketed = scratch.data();
  for (uint64_t k : keys) bucketed[start[(k >> shift) + 1]++] = k;  // stable
  // Insertion by the top 32 bits (strict compare: stable), from the
  // bucketed copy into keys.
  uint64_t* out = keys.data();
  size_t budget = kMovesPerKey * m;
  out[0] = bucketed[0];
  for (size_t i = 1; i < m; ++i) {
    const uint64_t k = bucketed[i];
    if ((out[i - 1] >> 32) <= (k >> 32)) {  // in order: ~70% of keys
      out[i] = k;
      continue;
    }
    size_t j = i;
    do {
      out[j] = out[j - 1];
      --j;
    } while (j > 0 && (out[j - 1] >> 32) > (k >> 32));
    out[j] = k;
    const size_t moved = i - j;
    if (moved > budget) {
      // The bucketed order kept the input's order among equal keys, so the
      // stable LSD sort of it is the stable sort of the input; the bucket
      // bounds hold for any sorted order.
      std::copy(bucketed, bucketed + m, out);
      LsdRadixSort(keys, scratch);
      return;
    }
    budget -= moved;
  }
}

}  // namespace

void SortKeysByHashPrefix(absl::Span<uint64_t> keys,
                          std::vector<uint64_t>& scratch) {
  if (keys.size() < 2) return;
  uint32_t start[(1 << kMaxBucketBits) + 2];
  BucketSort(keys, scratch, BucketBits(keys.size()), start);
}

BucketedCandidates CandidateSorter::Bucket(absl::Span<const uint64_t> keys) {
  constexpr int kMaxBits = 14;  // 2^14 counters: 64 KiB, L2
  const size_t m = keys.size();
  // m >= 2 gives bits >= 1 (a shift by 64 would be undefined); m < 2 is one
  // bucket of bits 0, laid out by hand.
  const int bits =
      m < 2
          ? 0
          : std::min(
                static_cast<int>(absl::bit_width(static_cast<uint64_t>(m))) - 1,
                kMaxBits);
  const size_t buckets = size_t{1} << bits;
  bucket_start_.resize(buckets + 2);
  bucketed_.resize(m + BucketedCandidates::kPadding);
  uint32_t* start = bucket_start_.data();
  uint64_t* out = bucketed_.data();
  if (m < 2) {
    start[0] = 0;
    start[1] = static_cast<uint32_t>(m);
    if (m == 1) out[0] = keys[0];
  } else {
    // Counted two places up, as BucketSort.
    const int shift = 64 - bits;
    std::fill(start, start + buckets + 2, 0u);
    for (uint64_t k : keys) ++start[(k >> shift) + 2];
    for (size_t j = 2; j < buckets + 2; ++j) start[j] += start[j - 1];
    for (uint64_t k : keys) out[start[(k >> shift) + 1]++] = k;
  }
  std::fill(out + m, out + m + BucketedCandidates::kPadding, uint64_t{0});
  BucketedCandidates c;
  c.keys = out;
  c.size = m;
  c.bucket_bits = bits;
  c.bucket_start = start;
  return c;
}

}  // namespace exposure_filter
