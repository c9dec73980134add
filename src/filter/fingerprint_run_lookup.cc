// FingerprintRunView's membership tests: one fingerprint (through the skip
// index when there is one), and batches of candidates against the run's codes
// (a galloping merge over sorted candidates, or a fixed window over bucketed
// ones).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/base/optimization.h"
#include "absl/numeric/bits.h"
#include "absl/types/span.h"
#include "src/filter/candidate_sort.h"
#include "src/filter/fingerprint_run.h"
#include "src/filter/fingerprint_run_internal.h"

namespace exposure_filter {

using fingerprint_run_internal::RunDecoder;

bool FingerprintRunView::ContainsFingerprint(uint32_t fp) const {
  if (count_ == 0) return false;
  RunDecoder dec(words_, bit_offset_, rice_k_);
  uint64_t next = 0;
  uint32_t remaining = count_;
  uint32_t index = 0;
  uint64_t unary_pos = bit_offset_ + uint64_t{count_} * rice_k_;
  if (skip_stride_ != 0) {
    // Last entry whose fingerprint is <= fp, then at most stride - 1 codes.
    const uint64_t* e = skip_;
    const size_t entries = skip_entries();
    const uint64_t* it = std::upper_bound(
        e, e + entries, uint64_t{fp} << 32 | uint64_t{0xffffffff});
    if (it == e) return false;
    const uint64_t start = it[-1] >> 32;
    if (start == fp) return true;
    const size_t j = static_cast<size_t>(it - 1 - e);
    index = static_cast<uint32_t>(j * skip_stride_ + 1);
    unary_pos = it[-1] & 0xffffffff;
    next = start + 1;
    remaining = std::min<uint32_t>(skip_stride_, count_ - j * skip_stride_) - 1;
  }
  dec.Seek(index, unary_pos);
  for (; remaining > 0; --remaining) {
    const uint64_t f = next + dec.NextGap();
    if (f >= fp) return f == fp;
    next = f + 1;
  }
  return false;
}

// The merge of the run's codes with m sorted candidates. The codes must be
// decoded in order (each is a gap), but the candidates are an array: where
// the run is sparser than the batch (a 300-item slice against 5,000
// candidates: ~17 candidates per code) the walk gallops over the candidates
// below the current code instead of stepping through them, probing 1, 2,
// 4, ... ahead and then binary searching the last step: O(log(gap)) per
// code instead of O(gap), so a run of n codes costs O(n log(m / n) + n)
// rather than O(n + m); where the batch is the sparser side the first probe
// already lands and it is the plain merge. The run's cursor (cur = f_idx,
// decoder at code idx + 1) only moves forward; the skip index, when present,
// lets it jump over whole strides that lie below the next candidate.
template <typename FpAt, typename OnHit>
void FingerprintRunView::MergeWalk(size_t m, FpAt fp_at, OnHit on_hit) const {
  if (count_ == 0 || m == 0) return;
  RunDecoder dec(words_, bit_offset_, rice_k_);
  dec.Seek(0, bit_offset_ + uint64_t{count_} * rice_k_);
  uint64_t cur = dec.NextGap();
  uint32_t idx = 0;
  const uint64_t* e = skip_;
  const size_t entries = skip_entries();
  const int stride_log2 =
      skip_stride_ == 0 ? 0 : absl::countr_zero(skip_stride_);
  size_t i = 0;  // first candidate not yet settled
  uint64_t x = fp_at(0);
  for (;;) {
    if (x > cur) {
      // Move the run's cursor to the first code >= x.
      if (entries != 0) {
        size_t j = idx >> stride_log2;
        const size_t j0 = j;
        while (j + 1 < entries && (e[j + 1] >> 32) <= x) ++j;
        if (j != j0) {
          cur = e[j] >> 32;
          idx = static_cast<uint32_t>(j << stride_log2);
          dec.Seek(idx + 1, e[j] & 0xffffffff);
        }
      }
      while (cur < x) {
        if (idx + 1 == count_) return;  // every later candidate is larger
        cur += 1 + dec.NextGap();
        ++idx;
      }
    }
    if (cur == x) on_hit(i);
    // The next candidate; where the run is the sparser side it is still
    // below cur, and the walk gallops: fp_at(lo) < cur throughout, and the
    // first candidate >= cur is in (lo, min(lo + step, m)].
    if (++i == m) return;
    x = fp_at(i);
    if (x < cur) {
      size_t lo = i, step = 1;
      while (lo + step < m && fp_at(lo + step) < cur) {
        lo += step;
        step <<= 1;
      }
      size_t base = lo + 1;
      size_t len = std::min(lo + step, m) - base;
      while (len > 0) {  // lower bound in [base, base + len), no branches
        const size_t half = len / 2;
        const bool below = fp_at(base + half) < cur;
        base = below ? base + half + 1 : base;
        len = below ? len - half - 1 : half;
      }
      i = base;
      if (i == m) return;
      x = fp_at(i);
    }
  }
}

void FingerprintRunView::ContainsSorted(absl::Span<const uint32_t> sorted_fps,
                                        uint8_t* member) const {
  std::fill(member, member + sorted_fps.size(), uint8_t{0});
  MergeWalk(
      sorted_fps.size(), [&](size_t i) { return uint64_t{sorted_fps[i]}; },
      [&](size_t i) { member[i] = 1; });
}

void FingerprintRunView::RemoveContainedSorted(
    absl::Span<const uint64_t> sorted_keys, uint8_t* keep) const {
  const int b = precision_;
  const uint64_t u = universe_;
  MergeWalk(
      sorted_keys.size(),
      [&](size_t i) {
        return uint64_t{FingerprintRun::Fingerprint(sorted_keys[i], b, u)};
      },
      [&](size_t i) { keep[static_cast<uint32_t>(sorted_keys[i])] = 0; });
}

// For code f, a candidate whose fingerprint is f has a b-bit prefix P with
// floor(P U / 2^b) = f, i.e. f 2^b / U <= P < (f + 1) 2^b / U. For
// E <= b its top E bits are floor(P / 2^(b - E)), so they lie in
// [floor(f 2^E / U), floor((f + 1) 2^E / U)] (divide the bounds by
// 2^(b - E), take floors; the upper one: < (f + 1) 2^E / U). The walk uses
// E = min(B, b) bits (for b < B a B-bit bucket's low B - b bits are hash
// bits below the prefix, free of f, and the upper bound would fail); a
// bucket of the top E bits is a run of 2^(B - E) buckets of B bits. With
//   recip_lo = floor(2^(E + 32) / U),  recip_hi = ceil(2^(E + 32) / U),
// (f recip_lo) >> 32 <= floor(f 2^E / U) and ((f + 1) recip_hi) >> 32 >=
// floor((f + 1) 2^E / U) (both products <= 2^(E + 32) + U < 2^64), so the
// buckets between them hold every candidate that can equal f: checking
// all of them is exact. Fingerprints are spread over U >> 2^E values, so
// that is one bucket (two when f's prefixes straddle a bucket edge or the
// reciprocal rounds), lambda in [1, 2) candidates each on average
// (CandidateSorter::Bucket): a fixed window of kWindow = 4 checks covers it
// without a data-dependent branch (one bucket of fresh candidates at
// lambda = 1.22, m = 5,000: P(Poisson > 4) = 0.8% takes the loop; a
// window of 8 measured slower, its extra checks cost more than the loops
// it avoided). Candidates repeated or on the walk's own codes crowd the
// bucket: a code the batch holds sits with 1 + Poisson(lambda) others.
// FilterRecalled no longer takes this walk (ClaimIndex: one probe per
// candidate); GetFilter's client (FilterView) and UserFilter's fallback
// for tiny universes do. Each check clears keep[tag] iff the
// candidate's fingerprint is f
// and it is inside the range: outside it a true member could be cleared
// harmlessly, but the zero padding past the last bucket carries tag 0,
// which is some other candidate.
// The mispredicted branches of a merge (one per candidate or per code, ~15
// cycles each) were most of its time; this walk has none in the common case.
void FingerprintRunView::RemoveContained(const BucketedCandidates& candidates,
                                         uint8_t* keep) const {
  constexpr uint32_t kWindow = 4;  // <= BucketedCandidates::kPadding
  const uint64_t* keys = candidates.keys;
  if (count_ == 0 || candidates.size == 0) return;
  const int b = precision_;
  const uint64_t u = universe_;
  const int e = std::min(candidates.bucket_bits, b);
  const int coarse = candidates.bucket_bits - e;  // B - E
  const uint64_t scale = uint64_t{1} << (e + 32);
  const uint64_t recip_lo = scale / u;
  const uint64_t recip_hi = (scale + u - 1) / u;
  const uint64_t last_bucket = (uint64_t{1} << e) - 1;
  const uint32_t* bucket_start = candidates.bucket_start;
  RunDecoder dec(words_, bit_offset_, rice_k_);
  dec.Seek(0, bit_offset_ + uint64_t{count_} * rice_k_);
  // Codes are decoded a block at a time into `fps` and checked in a second
  // loop: the decoder is one serial chain (each fingerprint needs the last),
  // the checks are independent of each other, and apart they neither share
  // registers nor wait on each other (one loop of both spilled and
  // serialized them).
  constexpr uint32_t kBlock = 64;
  uint64_t fps[kBlock];
  uint64_t next = 0;
  for (uint32_t done = 0; done < count_;) {
    const uint32_t block = std::min(kBlock, count_ - done);
    for (uint32_t j = 0; j < block; ++j) {
      const uint64_t f = next + dec.NextGap();
      fps[j] = f;
      next = f + 1;
    }
    done += block;
    for (uint32_t j = 0; j < block; ++j) {
      const uint64_t f = fps[j];
      const uint32_t lo = bucket_start[((f * recip_lo) >> 32) << coarse];
      const uint32_t hi =
          bucket_start[(std::min(((f + 1) * recip_hi) >> 32, last_bucket) + 1)
                       << coarse];
      const uint32_t len = hi - lo;
      if (ABSL_PREDICT_TRUE(len <= kWindow)) {
        for (uint32_t t = 0; t < kWindow; ++t) {
          const uint64_t k = keys[lo + t];
          const bool hit =
              (FingerprintRun::Fingerprint(k, b, u) == f) & (t < len);
          keep[static_cast<uint32_t>(k)] &= static_cast<uint8_t>(!hit);
        }
      } else {
        for (uint32_t j2 = lo; j2 < hi; ++j2) {
          if (FingerprintRun::Fingerprint(keys[j2], b, u) == f) {
            keep[static_cast<uint32_t>(keys[j2])] = 0;
          }
        }
      }
    }
  }
}

}  // namespace exposure_filter
