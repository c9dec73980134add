#include "src/filter/claim_index.h"

#include <algorithm>
#include <limits>

#include "absl/base/optimization.h"
#include "absl/numeric/bits.h"
#include "src/filter/candidate_sort.h"
#include "src/filter/claim_bitmap.h"
#include "src/filter/claim_cost.h"
#include "src/filter/claim_probe.h"
#include "src/filter/probe_kernel.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace exposure_filter {
namespace {

// At least the number of E-bit buckets any code of run (b, U) is filed
// under (Build's refusal bound). For E' = min(E, b) the code's claimed
// b-bit prefixes P (floor(P U / 2^b) = f) have top E' bits in
// [floor(f 2^E' / U), floor((f + 1) 2^E' / U)]: at most ceil(2^E' / U) + 1
// E'-bit buckets (+2 kept as slack), each 2^(E - E') E-bit ones.
uint64_t MaxBucketsPerCode(int bits, int precision, uint64_t universe) {
  const int e = std::min(bits, precision);
  return (((uint64_t{1} << e) + universe - 1) / universe + 3) << (bits - e);
}

// The hashes code f of run (b, U) claims: those whose b-bit prefix P has
// floor(P U / 2^b) = f, i.e. ceil(f 2^b / U) <= P < ceil((f + 1) 2^b / U),
// as the 64-bit hash interval [P_lo 2^(64 - b), P_hi 2^(64 - b) - 1].
// With b <= 32 both ends are whole 2^32-hash granules (the first's low 32
// bits are zero, the last's all ones), so the interval is exactly the
// granules G = h >> 32 in [P_lo 2^(32 - b), P_hi 2^(32 - b) - 1]: 32-bit
// bounds, an 8-byte entry. A
// prefix run (U = 2^b) is the interval of P = f; otherwise the ceilings
// divide n = f 2^b + U - 1 < U 2^b <= 2^64 by U through the reciprocal
// R = floor((2^64 - 1) / U) > 2^64 / U - 1: floor(n R / 2^64) >
// n / U - n / 2^64 - 1 > n / U - 2, so at most two corrections make it
// floor(n / U). No division per code.
class PrefixRange {
 public:
  PrefixRange(int precision, uint64_t universe)
      : b_(precision),
        u_(universe),
        prefix_(universe == uint64_t{1} << precision),
        recip_(~uint64_t{0} / universe) {}
  ClaimIndex::Entry Of(uint64_t f) const {
    const int low = 32 - b_;  // b <= 32
    const uint64_t p_lo = prefix_ ? f : CeilPrefix(f);
    const uint64_t p_hi = prefix_ ? f + 1 : CeilPrefix(f + 1);
    // p_hi <= 2^b: both fit in 32 bits.
    const uint32_t first = static_cast<uint32_t>(p_lo << low);
    const uint32_t last = static_cast<uint32_t>((p_hi << low) - 1);
    return {first, last - first};
  }

 private:
  // ceil(f 2^b / U) for f <= U < 2^b.
  uint64_t CeilPrefix(uint64_t f) const {
    const uint64_t n = (f << b_) + u_ - 1;
    uint64_t q = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(n) * recip_) >> 64);
    // Branch-free: the corrections are data-dependent (taken about half
    // the time), and Build runs this twice per code.
    uint64_t r = n - q * u_;
    const uint64_t c1 = r >= u_;
    q += c1;
    r -= u_ & (0 - c1);
    return q + (r >= u_);
  }

  int b_;
  uint64_t u_;
  bool prefix_;
  uint64_t recip_;
};

// Build's scratch: one run's codes and every code's interval, read only
// while filing. Per thread rather than per index, so that an index kept
// to be probed (FilterView::FileRuns) holds only what a probe reads and a
// filing allocates none of it once the thread's buffers have grown.
struct BuildScratch {
  std::vector<uint32_t> fps;
  std::vector<ClaimIndex::Entry> intervals;
};

BuildScratch& ThreadBuildScratch() {
  thread_local BuildScratch scratch;
  return scratch;
}

// p[i] += p[i - 1] for i = 1 .. n - 1: the bucket counts into starts. A
// loop-carried add per bucket, and Build makes ~7 buckets per code, so
// the scan takes about as long as filing the codes did (~40% of a Build
// in perf of the server's FilterRecalled): eight lanes a step on AVX2.
void PrefixSumPortable(uint32_t* p, size_t n) {
  for (size_t i = 1; i < n; ++i) p[i] += p[i - 1];
}

#if defined(__x86_64__)
// Each 8-lane step: the two 128-bit halves scanned in place (shift by one
// and two lanes and add), the low half's total added to the high half, and
// the running total of the steps before added to all 8.
__attribute__((target("avx2"))) void PrefixSumAvx2(uint32_t* p, size_t n) {
  const __m256i last_lane = _mm256_set1_epi32(7);
  const __m256i low_last = _mm256_set1_epi32(3);
  __m256i carry = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    x = _mm256_add_epi32(x, _mm256_slli_si256(x, 4));
    x = _mm256_add_epi32(x, _mm256_slli_si256(x, 8));
    // Lane 3 (the low half's total) into lanes 4..7 only.
    const __m256i half = _mm256_blend_epi32(
        _mm256_setzero_si256(), _mm256_permutevar8x32_epi32(x, low_last), 0xF0);
    x = _mm256_add_epi32(_mm256_add_epi32(x, half), carry);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i), x);
    carry = _mm256_permutevar8x32_epi32(x, last_lane);
  }
  uint32_t total = i == 0 ? 0 : p[i - 1];
  for (; i < n; ++i) p[i] = total += p[i];
}
#endif

void PrefixSum(uint32_t* p, size_t n) {
#if defined(__x86_64__)
  static const bool avx2 = Avx2Supported() && !PortableKernelsForced();
  if (avx2) return PrefixSumAvx2(p, n);
#endif
  PrefixSumPortable(p, n);
}

}  // namespace

int ClaimIndex::BucketBits(size_t n) {
  return std::min(static_cast<int>(absl::bit_width(uint64_t{n})) + 2, kMaxBits);
}

bool ClaimIndex::Build(absl::Span<const FingerprintRunView> runs) {
  filings_ = 0;
  size_t n = 0;
  for (const FingerprintRunView& r : runs) n += r.count();
  if (n == 0) return true;
  bits_ = BucketBits(n);
  const size_t buckets = size_t{1} << bits_;
  // Refuse before any work if the filing bound could be passed.
  const uint64_t limit = kMaxFilingsPerCode * n + buckets;
  uint64_t bound = 0;
  for (const FingerprintRunView& r : runs) {
    if (r.count() == 0) continue;
    bound += r.count() * MaxBucketsPerCode(bits_, r.precision(), r.universe());
    if (bound > limit) return false;
  }
  // Each code's claimed interval, computed once, in run order; the E-bit
  // buckets it files under are exactly those its interval overlaps,
  // first >> (32 - E) .. last >> (32 - E) in granules (one, or two where it
  // straddles an edge; more only for runs with U < 2^E). Counted two places up
  // (as CandidateSorter), prefix-summed into starts, then scattered.
  const int shift = 32 - bits_;  // bucket = granule >> (32 - E)
  start_.assign(buckets + 2, 0u);
  uint32_t* count = start_.data() + 2;
  // Sized once and written field by field: push_back(Entry) made GCC store
  // the two words apart and reload them as one 16-byte word, a failed store
  // forward per code (~45% of Build in perf).
  BuildScratch& scratch = ThreadBuildScratch();
  if (scratch.intervals.size() < n) scratch.intervals.resize(n);
  Entry* interval = scratch.intervals.data();
  for (const FingerprintRunView& r : runs) {
    if (r.count() == 0) continue;
    scratch.fps.clear();
    r.AppendFingerprints(&scratch.fps);
    const PrefixRange prefixes(r.precision(), r.universe());
    for (const uint32_t f : scratch.fps) {
      const Entry e = prefixes.Of(f);
      interval->first = e.first;
      interval->width = e.width;
      ++interval;
      const uint32_t last = (e.first + e.width) >> shift;
      for (uint32_t x = e.first >> shift; x <= last; ++x) ++count[x];
    }
  }
  PrefixSum(start_.data() + 1, buckets + 1);
  filings_ = start_[buckets + 1];
  entries_.resize(filings_ + kPadding);
  // Scatter: bucket x's entries go to [start[x], start[x + 1]), with
  // start_[x + 1] as x's cursor (counted two places up, it now holds x's
  // start and ends at x + 1's).
  uint32_t* cursor = start_.data() + 1;
  for (const Entry* e = scratch.intervals.data(); e != interval; ++e) {
    const uint32_t last = (e->first + e->width) >> shift;
    for (uint32_t x = e->first >> shift; x <= last; ++x) {
      entries_[cursor[x]++] = *e;
    }
  }
  // Padding, read by a probe past the last bucket, masked off by len.
  std::fill(entries_.begin() + filings_, entries_.end(), Entry{0, 0});
  // A heavy user's scratch is not kept by the thread (as Trim does for
  // an index's buffers).
  if (scratch.intervals.capacity() > kKeepCodes ||
      scratch.fps.capacity() > kKeepCodes) {
    scratch = BuildScratch();
  }
  return true;
}

void ClaimIndex::Trim() {
  if (entries_.capacity() > kKeepCodes) {
    std::vector<Entry>().swap(entries_);
    filings_ = 0;
  }
}

size_t ClaimIndex::retained_bytes() const {
  return start_.capacity() * sizeof(uint32_t) +
         entries_.capacity() * sizeof(Entry);
}

void ClaimIndex::RemoveClaimed(absl::Span<const uint64_t> hashes,
                               uint8_t* keep) const {
  if (filings_ == 0) return;
  ActiveClaimProbe()(filed(), hashes.data(), hashes.size(), keep);
}

FiledClaims ClaimIndex::filed() const {
  return FiledClaims{start_.data(), entries_.data(), 32 - bits_};
}

void RemoveClaimedByRuns(absl::Span<const FingerprintRunView> runs,
                         absl::Span<const uint64_t> hashes, uint8_t* keep) {
  if (runs.empty() || hashes.empty()) return;
  // Few runs of small universes (a user's usual shape): their bit sets.
  if (BitmapCheaperThanIndex(runs, hashes.size())) {
    thread_local ClaimBitmap bitmap;
    bitmap.RemoveClaimed(runs, hashes, keep);
    bitmap.Trim();
    return;
  }
  // Per thread, reused for every request: no allocation once grown.
  struct Scratch {
    ClaimIndex index;
    std::vector<uint64_t> keys;
    CandidateSorter sorter;
  };
  thread_local Scratch scratch;
  if (scratch.index.Build(runs)) {
    scratch.index.RemoveClaimed(hashes, keep);
    scratch.index.Trim();
    return;
  }
  scratch.index.Trim();
  // The sort keys carry the candidate's index in 32 bits.
  if (hashes.size() > std::numeric_limits<uint32_t>::max()) {
    for (size_t i = 0; i < hashes.size(); ++i) {
      for (const FingerprintRunView& run : runs) {
        if (run.Contains(hashes[i])) keep[i] = 0;
      }
    }
    return;
  }
  // Sized once, filled without push_back's capacity check per key.
  if (scratch.keys.size() < hashes.size()) scratch.keys.resize(hashes.size());
  uint64_t* keys = scratch.keys.data();
  size_t m = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    keys[m] = FingerprintRun::SortKey(hashes[i], static_cast<uint32_t>(i));
    m += keep[i] != 0;
  }
  if (m == 0) return;
  const BucketedCandidates bucketed =
      scratch.sorter.Bucket(absl::Span<const uint64_t>(keys, m));
  for (const FingerprintRunView& run : runs) {
    run.RemoveContained(bucketed, keep);
  }
  if (scratch.keys.capacity() > ClaimIndex::kKeepCodes) {
    std::vector<uint64_t>().swap(scratch.keys);
  }
}

}  // namespace exposure_filter
