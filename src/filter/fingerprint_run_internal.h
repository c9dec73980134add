// Internal to FingerprintRun's implementation (fingerprint_run.cc, the code
// itself, and fingerprint_run_lookup.cc, the membership walks): the
// sequential decoder both use. Not part of the filter's API; include it only
// from fingerprint_run*.cc.
#ifndef EXPOSURE_FILTER_SRC_FILTER_FINGERPRINT_RUN_INTERNAL_H_
#define EXPOSURE_FILTER_SRC_FILTER_FINGERPRINT_RUN_INTERNAL_H_

#include <cstdint>

#include "absl/numeric/bits.h"
#include "src/filter/bit_words.h"

namespace exposure_filter {
namespace fingerprint_run_internal {

// Sequential decoder of a validated payload. A code's two halves live in
// separate streams (header comment): remainder i at the fixed bit i * k, the
// unary parts after all remainders. The loop-carried dependency is then only
// "next set bit of the unary stream" (x &= x - 1, count trailing zeros), not
// the variable length of each code, and the remainder loads run ahead.
class RunDecoder {
 public:
  // The remainders start at bit `rem_base` of `words`.
  RunDecoder(const uint64_t* words, uint64_t rem_base, int k)
      : words_(words),
        rem_base_(rem_base),
        k_(k),
        mask_((uint64_t{1} << k) - 1) {}
  // Positions the decoder at code `index`, whose unary part starts at bit
  // `unary_pos`.
  void Seek(uint32_t index, uint64_t unary_pos) {
    rem_pos_ = rem_base_ + uint64_t{index} * k_;
    unary_pos_ = unary_pos;
    word_ = unary_pos >> 6;
    bits_ = words_[word_] & (~uint64_t{0} << (unary_pos & 63));
  }
  // The gap d of the current code; advances to the next one. Only call for a
  // code that exists: its set bit is then inside the payload.
  uint64_t NextGap() {
    while (bits_ == 0) bits_ = words_[++word_];
    const uint64_t one = (word_ << 6) + absl::countr_zero(bits_);
    bits_ &= bits_ - 1;
    const uint64_t q = one - unary_pos_;
    unary_pos_ = one + 1;
    // k = 0: mask 0 (Peek64 at the payload's first bit stays inside).
    const uint64_t r = Peek64(words_, rem_pos_) & mask_;
    rem_pos_ += k_;
    return (q << k_) | r;
  }
  // Start of the next code's unary part (a skip entry's offset).
  uint64_t unary_pos() const { return unary_pos_; }

 private:
  const uint64_t* words_;
  uint64_t rem_base_;
  int k_;
  uint64_t mask_;
  uint64_t rem_pos_ = 0;  // the current code's remainder
  uint64_t unary_pos_ = 0;
  uint64_t word_ = 0;
  uint64_t bits_ = 0;
};

}  // namespace fingerprint_run_internal
}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_FINGERPRINT_RUN_INTERNAL_H_
