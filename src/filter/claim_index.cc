#include "src/filter/claim_index.h"

#include <algorithm>
#include <limits>

#include "absl/base/optimization.h"
#include "absl/numeric/bits.h"
#include "src/filter/candidate_sort.h"

namespace exposure_filter {
namespace {

// The E-bit buckets holding every hash a code of run (b, U) may claim.
// For E' = min(E, b) the claimed b-bit prefixes P (floor(P U / 2^b) = f)
// have top E' bits in [floor(f 2^E' / U), floor((f + 1) 2^E' / U)]; with
// recip_lo = floor(2^(E' + 32) / U) and recip_hi = ceil(2^(E' + 32) / U)
// the bounds below are at or outside those (both products stay below
// 2^(E' + 32) + U < 2^64); an E'-bit bucket is 2^(E - E') E-bit ones
// (FingerprintRunView::RemoveContained has the same math).
class BucketRange {
 public:
  BucketRange(int bits, int precision, uint64_t universe)
      : e_(std::min(bits, precision)),
        coarse_(bits - e_),
        recip_lo_((uint64_t{1} << (e_ + 32)) / universe),
        recip_hi_(((uint64_t{1} << (e_ + 32)) + universe - 1) / universe),
        last_((uint64_t{1} << e_) - 1) {}
  uint64_t first(uint64_t f) const {
    return ((f * recip_lo_) >> 32) << coarse_;
  }
  uint64_t end(uint64_t f) const {
    return (std::min(((f + 1) * recip_hi_) >> 32, last_) + 1) << coarse_;
  }
  // At least end(f) - first(f) for every f of the run: the true range
  // spans at most ceil(2^E' / U) + 1 E'-bit buckets, each bound may be one
  // off.
  uint64_t max_span(uint64_t universe) const {
    return (((uint64_t{1} << e_) + universe - 1) / universe + 3) << coarse_;
  }

 private:
  int e_;
  int coarse_;
  uint64_t recip_lo_;
  uint64_t recip_hi_;
  uint64_t last_;
};

// The hashes code f of run (b, U) claims: those whose b-bit prefix P has
// floor(P U / 2^b) = f, i.e. ceil(f 2^b / U) <= P < ceil((f + 1) 2^b / U),
// as the 64-bit hash interval [P_lo 2^(64 - b), P_hi 2^(64 - b) - 1]. A
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
    const int low = 64 - b_;  // b <= 32
    const uint64_t p_lo = prefix_ ? f : CeilPrefix(f);
    const uint64_t p_hi = prefix_ ? f + 1 : CeilPrefix(f + 1);
    const uint64_t first = p_lo << low;
    const uint64_t last = ((p_hi - 1) << low) | ((uint64_t{1} << low) - 1);
    return {first, last - first};
  }

 private:
  // ceil(f 2^b / U) for f <= U < 2^b.
  uint64_t CeilPrefix(uint64_t f) const {
    const uint64_t n = (f << b_) + u_ - 1;
    uint64_t q = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(n) * recip_) >> 64);
    uint64_t r = n - q * u_;
    if (r >= u_) {
      ++q;
      r -= u_;
    }
    if (r >= u_) ++q;
    return q;
  }

  int b_;
  uint64_t u_;
  bool prefix_;
  uint64_t recip_;
};

}  // namespace

bool ClaimIndex::Build(absl::Span<const FingerprintRunView> runs) {
  filings_ = 0;
  runs_.clear();
  fps_.clear();
  size_t n = 0;
  for (const FingerprintRunView& r : runs) n += r.count();
  if (n == 0) return true;
  bits_ =
      std::min(static_cast<int>(absl::bit_width(uint64_t{n})) + 2, kMaxBits);
  const size_t buckets = size_t{1} << bits_;
  // Refuse before any work if the filing bound could be passed.
  const uint64_t limit = kMaxFilingsPerCode * n + buckets;
  uint64_t bound = 0;
  for (const FingerprintRunView& r : runs) {
    if (r.count() == 0) continue;
    bound +=
        r.count() *
        BucketRange(bits_, r.precision(), r.universe()).max_span(r.universe());
    if (bound > limit) return false;
  }
  // Count each bucket's entries (two places up, as CandidateSorter), then
  // prefix-sum them into starts and scatter.
  start_.assign(buckets + 2, 0u);
  uint32_t* count = start_.data() + 2;
  for (const FingerprintRunView& r : runs) {
    if (r.count() == 0) continue;
    const size_t from = fps_.size();
    r.AppendFingerprints(&fps_);
    const BucketRange range(bits_, r.precision(), r.universe());
    for (size_t i = from; i < fps_.size(); ++i) {
      const uint64_t first = range.first(fps_[i]);
      const uint64_t end = range.end(fps_[i]);
      ++count[first];
      for (uint64_t x = first + 1; x < end; ++x) ++count[x];
    }
    runs_.push_back({r.universe(), r.precision(), r.count()});
  }
  for (size_t j = 2; j < buckets + 2; ++j) start_[j] += start_[j - 1];
  filings_ = start_[buckets + 1];
  entries_.resize(filings_ + kPadding);
  // Scatter: bucket x's entries go to [start[x], start[x + 1]), with
  // start_[x + 1] as x's cursor (counted two places up, it now holds x's
  // start and ends at x + 1's).
  uint32_t* cursor = start_.data() + 1;
  size_t at = 0;
  for (size_t run = 0; run < runs_.size(); ++run) {
    const RunParams& p = runs_[run];
    const BucketRange range(bits_, p.precision, p.universe);
    const PrefixRange prefixes(p.precision, p.universe);
    for (const size_t to = at + p.count; at < to; ++at) {
      const uint64_t f = fps_[at];
      const Entry e = prefixes.Of(f);
      const uint64_t end = range.end(f);
      for (uint64_t x = range.first(f); x < end; ++x) {
        entries_[cursor[x]++] = e;
      }
    }
  }
  // Padding, read by a probe past the last bucket, masked off by len.
  std::fill(entries_.begin() + filings_, entries_.end(), Entry{0, 0});
  return true;
}

void ClaimIndex::Trim() {
  if (fps_.capacity() > kKeepCodes || entries_.capacity() > kKeepCodes) {
    std::vector<uint32_t>().swap(fps_);
    std::vector<Entry>().swap(entries_);
    filings_ = 0;
  }
}

size_t ClaimIndex::retained_bytes() const {
  return runs_.capacity() * sizeof(RunParams) +
         fps_.capacity() * sizeof(uint32_t) +
         start_.capacity() * sizeof(uint32_t) +
         entries_.capacity() * sizeof(Entry);
}

void ClaimIndex::RemoveClaimed(absl::Span<const uint64_t> hashes,
                               uint8_t* keep) const {
  if (filings_ == 0) return;
  const int shift = 64 - bits_;
  const uint32_t* start = start_.data();
  const Entry* entries = entries_.data();
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint64_t h = hashes[i];
    const uint64_t x = h >> shift;
    const uint32_t lo = start[x];
    const uint32_t len = start[x + 1] - lo;
    // One check without a branch (the bucket's first entry, or the next
    // bucket's / the padding when it is empty: masked by len), more only
    // for buckets holding two or more codes.
    bool hit = (len != 0) & (h - entries[lo].first <= entries[lo].width);
    if (ABSL_PREDICT_FALSE(len > 1)) {
      for (uint32_t j = lo + 1; j < lo + len; ++j) {
        hit |= h - entries[j].first <= entries[j].width;
      }
    }
    keep[i] &= static_cast<uint8_t>(!hit);
  }
}

void RemoveClaimedByRuns(absl::Span<const FingerprintRunView> runs,
                         absl::Span<const uint64_t> hashes, uint8_t* keep) {
  if (runs.empty() || hashes.empty()) return;
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
