#include "src/filter/claim_bitmap.h"

#include <algorithm>

namespace exposure_filter {
namespace {

// The fingerprint with one multiply and no shift by a variable: with M the
// mask of the top b bits, h & M = P 2^(64 - b) for P = h >> (64 - b), so
// floor((h & M) U / 2^64) = floor(P U / 2^b) = fp(h): the high word of the
// 128-bit product (below U, as fp(h) is).
inline uint64_t ProbeBit(const ClaimBitmap::Probe& p, uint64_t h) {
  const unsigned __int128 x =
      static_cast<unsigned __int128>(h & p.mask) * p.universe;
  return p.offset + static_cast<uint64_t>(x >> 64);
}

// One pass over the candidates against kRuns runs, unrolled: a loop over a
// run count known only at run time cost about 1.7 times as much per run
// (BM_ClaimBitmap/n/3, /n/4 and /n/7), so more runs take several passes.
// (Copying the runs' constants to locals, which a store to keep[] makes the
// compiler reload per candidate, saved 4% of the instructions at 2 runs
// but no time, and cost time at 3 and 4 runs.)
template <int kRuns>
void ProbeAll(const ClaimBitmap::Probe* probes, const uint64_t* bits,
              absl::Span<const uint64_t> hashes, uint8_t* keep) {
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint64_t h = hashes[i];
    uint64_t hit = 0;
    for (int r = 0; r < kRuns; ++r) {
      const uint64_t bit = ProbeBit(probes[r], h);
      hit |= bits[bit >> 6] >> (bit & 63);
    }
    keep[i] &= static_cast<uint8_t>(~hit & 1);
  }
}

}  // namespace

bool ClaimBitmap::Fits(absl::Span<const FingerprintRunView> runs) {
  for (const FingerprintRunView& r : runs) {
    if (r.count() != 0 && r.universe() > kMaxBits) return false;
  }
  return true;
}

size_t ClaimBitmap::BatchEnd(absl::Span<const FingerprintRunView> runs,
                             size_t begin) {
  uint64_t total = 0;
  size_t end = begin;
  for (; end < runs.size(); ++end) {
    if (runs[end].count() == 0) continue;
    // Each universe <= 2^32: the sum does not overflow.
    if (total + runs[end].universe() > kMaxBits && total != 0) break;
    total += runs[end].universe();
  }
  return end;
}

size_t ClaimBitmap::Passes(absl::Span<const FingerprintRunView> runs) {
  size_t passes = 0;
  for (size_t begin = 0; begin < runs.size();) {
    const size_t end = BatchEnd(runs, begin);
    size_t nonempty = 0;
    for (size_t r = begin; r < end; ++r) nonempty += runs[r].count() != 0;
    passes += (nonempty + kRunsPerPass - 1) / kRunsPerPass;
    begin = end;
  }
  return passes;
}

void ClaimBitmap::RemoveClaimed(absl::Span<const FingerprintRunView> runs,
                                absl::Span<const uint64_t> hashes,
                                uint8_t* keep) {
  if (hashes.empty()) return;
  for (size_t begin = 0; begin < runs.size();) {
    const size_t end = BatchEnd(runs, begin);
    RemoveClaimedBatch(runs.subspan(begin, end - begin), hashes, keep);
    begin = end;
  }
}

void ClaimBitmap::RemoveClaimedBatch(absl::Span<const FingerprintRunView> runs,
                                     absl::Span<const uint64_t> hashes,
                                     uint8_t* keep) {
  size_t n = 0;
  uint64_t total = 0;
  probes_.clear();
  for (const FingerprintRunView& r : runs) {
    if (r.count() == 0) continue;
    n += r.count();
    probes_.push_back(
        {~uint64_t{0} << (64 - r.precision()), r.universe(), total});
    total += r.universe();
  }
  if (n == 0) return;
  const size_t words = static_cast<size_t>((total + 63) / 64);
  if (bits_.size() < words) bits_.resize(words);  // zero-filled
  if (fps_.size() < n) fps_.resize(n);
  uint64_t* bits = bits_.data();
  // Decode each run's codes into the scratch, offset into its set (the
  // bitmap's bit index, < total <= kMaxBits for a fitting run set), and set
  // them.
  uint32_t* fp = fps_.data();
  const Probe* probe = probes_.data();
  for (const FingerprintRunView& run : runs) {
    if (run.count() == 0) continue;
    run.DecodeTo(fp);
    const uint32_t offset = static_cast<uint32_t>((probe++)->offset);
    for (uint32_t* end = fp + run.count(); fp != end; ++fp) {
      const uint32_t bit = *fp + offset;
      *fp = bit;
      bits[bit >> 6] |= uint64_t{1} << (bit & 63);
    }
  }
  for (size_t r = 0; r < probes_.size(); r += kRunsPerPass) {
    const Probe* group = probes_.data() + r;
    switch (std::min<size_t>(probes_.size() - r, kRunsPerPass)) {
      case 1:
        ProbeAll<1>(group, bits, hashes, keep);
        break;
      case 2:
        ProbeAll<2>(group, bits, hashes, keep);
        break;
      case 3:
        ProbeAll<3>(group, bits, hashes, keep);
        break;
      default:
        static_assert(kRunsPerPass == 4);
        ProbeAll<4>(group, bits, hashes, keep);
        break;
    }
  }
  // Clear what was set: the bitmap is all zero again for the next call.
  for (size_t i = 0; i < n; ++i) bits[fps_[i] >> 6] = 0;
}

void ClaimBitmap::Trim() {
  if (fps_.capacity() > kKeepCodes) std::vector<uint32_t>().swap(fps_);
}

size_t ClaimBitmap::retained_bytes() const {
  return fps_.capacity() * sizeof(uint32_t) +
         bits_.capacity() * sizeof(uint64_t) +
         probes_.capacity() * sizeof(Probe);
}

}  // namespace exposure_filter
