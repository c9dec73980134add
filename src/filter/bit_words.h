// Bit-level helpers over little-endian 64-bit words, LSB first: the layout
// of every Rice-coded run (fingerprint_run.h). Shared by the run's decoder
// (fingerprint_run_internal.h) and the splice of new fingerprints into a run
// (run_splice.cc). Internal to src/filter.
#ifndef EXPOSURE_FILTER_SRC_FILTER_BIT_WORDS_H_
#define EXPOSURE_FILTER_SRC_FILTER_BIT_WORDS_H_

#include <algorithm>
#include <cstdint>

#include "absl/numeric/int128.h"

namespace exposure_filter {

// 64 bits starting at bit `pos`. Reads words[pos / 64 + 1]: callers only
// peek at positions inside the payload, and the payload is followed by one
// padding word, so this never leaves the allocation.
inline uint64_t Peek64(const uint64_t* words, uint64_t pos) {
  const uint64_t i = pos >> 6;
  const unsigned s = pos & 63;
  // (w << 1) << (63 - s) is w << (64 - s) without the undefined shift by 64.
  return (words[i] >> s) | ((words[i + 1] << 1) << (63 - s));
}

// Sums runs of consecutive k-bit fields (1 <= k <= 31) inside a payload:
// one 64-bit peek per 64 / k fields. For k >= 4 one SWAR add pairs the
// fields into 2k-bit slots (each < 2^(k+1)) and one multiply by
// M = sum over i < S of 2^(2k i) (S = ceil((64 / k) / 2) slots) sums them:
// the product's slot S - 1 is slot_0 + ... + slot_(S-1), and no slot of the
// product carries into the next, since every partial sum is at most
// S 2 (2^k - 1) < 2^(2k) (k = 4: S = 8, 240 < 256; larger k, more room).
// The product reaches bit S 2k <= 64 + k, so it is taken in 128 bits.
// For k < 4 the slots would carry: pairwise SWAR adds, a slot of width w
// holding the sum of w / k fields is below (w / k) 2^k <= 2^w, so adding
// neighbouring slots never carries into the next: after
// ceil(log2(64 / k)) levels the sum sits in the low slot.
class FieldSummer {
 public:
  explicit FieldSummer(int k) : k_(k), per_(64 / k) {
    for (uint64_t w = k; w < uint64_t{per_} * k; w *= 2) {
      uint64_t m = 0;
      for (uint64_t start = 0; start < 64; start += 2 * w) {
        m |= ((uint64_t{1} << w) - 1) << start;  // w <= 32 here
      }
      masks_[levels_++] = m;
    }
    if (k >= kMultiplyFromK) {
      const uint32_t slots = (per_ + 1) / 2;
      for (uint32_t i = 0; i < slots; ++i)
        slot_ones_ |= uint64_t{1} << (2 * k * i);
      top_slot_ = 2 * k * (slots - 1);
      slot_mask_ = (uint64_t{1} << (2 * k)) - 1;
    }
  }
  // The c >= 1 fields from bit `pos`, all inside the payload.
  uint64_t Sum(const uint64_t* words, uint64_t pos, uint32_t c) const {
    uint64_t sum = 0;
    while (c > 0) {
      const uint32_t take = std::min(c, per_);
      const uint64_t bits = uint64_t{take} * k_;  // <= 64
      uint64_t v = Peek64(words, pos);
      if (bits < 64) v &= (uint64_t{1} << bits) - 1;
      if (k_ >= kMultiplyFromK) {
        // masks_[0]: the even fields.
        const uint64_t pairs = (v & masks_[0]) + ((v >> k_) & masks_[0]);
        sum += absl::Uint128Low64((absl::uint128(pairs) * slot_ones_) >>
                                  top_slot_) &
               slot_mask_;
      } else {
        uint64_t w = k_;
        for (int l = 0; l < levels_; ++l, w *= 2) {
          v = (v & masks_[l]) + ((v >> w) & masks_[l]);
        }
        sum += v;
      }
      pos += bits;
      c -= take;
    }
    return sum;
  }

 private:
  static constexpr int kMultiplyFromK = 4;
  int k_;
  uint32_t per_;
  int levels_ = 0;
  uint64_t masks_[6] = {};
  uint64_t slot_ones_ = 0;  // M
  unsigned top_slot_ = 0;   // 2k (S - 1)
  uint64_t slot_mask_ = 0;
};

// ORs `len` bits of `src` from bit `src_pos` into `dst` from bit `dst_pos`
// (those destination bits zero): the bits up to the destination's next word
// boundary, then whole destination words, each one Peek64 of the source
// ((w >> s) | (next << (64 - s))) and one OR, then the last partial word.
// Writes only the destination words that hold copied bits. Reads the word
// after the one holding the last source bit (Peek64's contract).
inline void OrBits(const uint64_t* src, uint64_t src_pos, uint64_t len,
                   uint64_t* dst, uint64_t dst_pos) {
  if (len == 0) return;
  uint64_t* d = dst + (dst_pos >> 6);
  const unsigned shift = dst_pos & 63;
  const uint64_t head = std::min<uint64_t>(len, 64 - shift);
  uint64_t v = Peek64(src, src_pos);
  if (head < 64) v &= (uint64_t{1} << head) - 1;
  *d++ |= v << shift;
  src_pos += head;
  len -= head;
  for (; len >= 64; len -= 64, src_pos += 64) *d++ |= Peek64(src, src_pos);
  if (len != 0) *d |= Peek64(src, src_pos) & ((uint64_t{1} << len) - 1);
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_BIT_WORDS_H_
