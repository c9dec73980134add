// Splicing fingerprints into a Rice-coded run: run_splice.h.
#include "src/filter/run_splice.h"

#include <cstring>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/numeric/bits.h"
#include "src/filter/bit_words.h"

namespace exposure_filter {
namespace {
// Word skips pay only while additions are sparse: a word of unary parts
// holds ~64 / (1 + E[q]) ~= 25-40 codes at the k runs get, a word's skip
// costs a popcount and a remainder sum (~4-8 instructions a code against
// the decode's ~25), and a word holding an addition's point is summed and
// then decoded up to it. Below one addition per this many codes the walk
// decodes code by code. Measured (callgrind, filter_bench
// BM_RecordFeedWrites: 20 additions against runs of ~300-1,100 codes):
// 16 and 64 both cost more instructions than 32.
constexpr uint64_t kSkipCodes = 32;

// The remainder at bit `pos` (`mask` = 2^k - 1): one unaligned 8-byte load
// at byte pos / 8, shifted by pos % 8, holds >= 57 valid bits >= k. Its last
// byte lies in word pos / 64 + 1 at most, what Peek64 reads too (the view's
// contract). k = 0: mask 0 (the load stays inside: the payload's first
// bytes).
inline uint64_t RemainderAt(const uint64_t* words, uint64_t pos,
                            uint64_t mask) {
  uint64_t r;
  std::memcpy(&r, reinterpret_cast<const unsigned char*>(words) + (pos >> 3),
              sizeof(r));
  return (r >> (pos & 7)) & mask;
}

// Dense additions: a merge of the codes, decoded one by one in a tight loop
// (the decoder's chain, fingerprint_run_internal.h RunDecoder), against the
// additions: each addition x gets the first code whose fingerprint is >= x.
// Out of line: its loop's registers do not depend on the word walk's.
ABSL_ATTRIBUTE_NOINLINE void LocateDense(const FingerprintRunView& run,
                                         absl::Span<const uint32_t> sorted_fps,
                                         SplicePoint* out) {
  const uint32_t n = run.count();
  const int k = run.rice_k();
  const uint64_t* words = run.words();
  const uint64_t mask = (uint64_t{1} << k) - 1;
  const size_t m = sorted_fps.size();
  if (m == 0) return;
  uint64_t rem_pos = run.bit_offset();
  uint64_t unary_pos = rem_pos + uint64_t{n} * k;
  uint64_t next = 0;
  size_t j = 0;
  uint64_t x = sorted_fps[0];  // the next addition to place
  // Word by word, each word's ones masked to the unary stream [unary_pos,
  // end): then its n ones are exactly the run's codes, and the loop needs
  // no count of them.
  const uint64_t end = run.bit_offset() + run.payload_bits();
  const uint64_t first_word = unary_pos >> 6;
  const uint64_t last_word = n == 0 ? 0 : (end - 1) >> 6;
  uint32_t idx = 0;
  for (uint64_t word = first_word; n != 0 && word <= last_word; ++word) {
    uint64_t bits = words[word];
    if (word == first_word) bits &= ~uint64_t{0} << (unary_pos & 63);
    if (word == last_word && (end & 63) != 0) {
      bits &= (uint64_t{1} << (end & 63)) - 1;
    }
    const uint64_t word_bit = word << 6;
    while (bits != 0) {
      const uint64_t one = word_bit + absl::countr_zero(bits);
      bits &= bits - 1;
      const uint64_t q = one - unary_pos;
      const uint64_t f = next + ((q << k) | RemainderAt(words, rem_pos, mask));
      if (ABSL_PREDICT_FALSE(f >= x)) {
        do {
          out[j] = {idx, static_cast<uint32_t>(f), static_cast<uint32_t>(q),
                    next, unary_pos};
          if (++j == m) return;
          x = sorted_fps[j];
        } while (x <= f);
      }
      rem_pos += k;
      unary_pos = one + 1;
      next = f + 1;
      ++idx;
    }
  }
  for (; j < m; ++j) out[j] = {n, 0, 0, next, unary_pos};
}

}  // namespace

// The decoder state: `idx` codes consumed, the next fingerprint at least
// `next`, code idx's unary part from `unary_pos` on, `bits` holding the ones
// of word `word` from there. Code idx is decoded ("peeked") without being
// consumed, so that the additions before it all get its point. The skip
// math: run_splice.h. A word whose last fingerprint is not below x is
// decoded code by code up to x's point only: its last fingerprint, once
// summed, is kept, and a later x above it passes the rest of the word at
// once (it was decoded to its end, then summed again, for every x in it).
void LocateInRun(const FingerprintRunView& run,
                 absl::Span<const uint32_t> sorted_fps, SplicePoint* out) {
  const uint32_t n = run.count();
  // Word skips only for sparse additions (kSkipCodes).
  if (uint64_t{n} <= sorted_fps.size() * kSkipCodes) {
    LocateDense(run, sorted_fps, out);
    return;
  }
  const int k = run.rice_k();
  const uint64_t* words = run.words();
  const uint64_t rem_base = run.bit_offset();
  const uint64_t mask = (uint64_t{1} << k) - 1;
  uint32_t idx = 0;
  uint64_t next = 0;
  uint64_t unary_pos = rem_base + uint64_t{n} * k;
  uint64_t word = unary_pos >> 6;
  uint64_t bits = n == 0 ? 0 : words[word] & (~uint64_t{0} << (unary_pos & 63));
  const FieldSummer summer(k == 0 ? 1 : k);
  // The last fingerprint of the c >= 1 codes from idx on whose last unary
  // one is bit `last`: next + (sum q << k) + sum r + c - 1. The c ones must
  // be the first c from unary_pos and c <= n - idx (then all are this
  // run's, whatever follows the payload).
  auto last_fp = [&](uint32_t c, uint64_t last) {
    const uint64_t sum_q = last + 1 - unary_pos - c;
    const uint64_t sum_r =
        k == 0 ? 0 : summer.Sum(words, rem_base + uint64_t{idx} * k, c);
    return next + (sum_q << k) + sum_r + c - 1;
  };
  // Every code before `to` consumed, the last at fingerprint f with its
  // unary one at bit `one`.
  auto pass = [&](uint32_t to, uint64_t f, uint64_t one) {
    idx = to;
    next = f + 1;
    unary_pos = one + 1;
  };
  // Word `known_word`'s codes end at fingerprint known_f (code
  // known_idx - 1, unary one at known_last); >= the x that summed it.
  uint64_t known_word = ~uint64_t{0}, known_f = 0, known_last = 0;
  uint32_t known_idx = 0;
  bool peeked = false;  // code idx decoded into peek_*
  uint64_t peek_one = 0, peek_f = 0, peek_q = 0;
  for (size_t j = 0; j < sorted_fps.size(); ++j) {
    const uint64_t x = sorted_fps[j];
    while (idx < n) {
      if (peeked) {
        if (peek_f >= x) break;
        bits &= bits - 1;  // consume code idx
        pass(idx + 1, peek_f, peek_one);
        peeked = false;
        continue;
      }
      // Codes remain, so a one bit lies ahead.
      while (bits == 0) bits = words[++word];
      // The rest of the word, if its last fingerprint is below x.
      if (word == known_word) {
        if (known_f < x) {
          pass(known_idx, known_f, known_last);
          bits = 0;
          continue;
        }
      } else {
        const uint32_t c = static_cast<uint32_t>(absl::popcount(bits));
        if (c <= n - idx) {
          const uint64_t last = (word << 6) + 63 - absl::countl_zero(bits);
          const uint64_t f_last = last_fp(c, last);
          if (f_last < x) {
            pass(idx + c, f_last, last);
            bits = 0;
            continue;
          }
          known_word = word;
          known_f = f_last;
          known_idx = idx + c;
          known_last = last;
        }
      }
      // Code by code to x's point (in this word).
      while (idx < n) {
        while (bits == 0) bits = words[++word];
        peek_one = (word << 6) + absl::countr_zero(bits);
        peek_q = peek_one - unary_pos;
        const uint64_t r =
            RemainderAt(words, rem_base + uint64_t{idx} * k, mask);
        peek_f = next + ((peek_q << k) | r);
        if (peek_f >= x) {
          peeked = true;
          break;
        }
        bits &= bits - 1;
        pass(idx + 1, peek_f, peek_one);
      }
    }
    SplicePoint& p = out[j];
    p.index = idx;
    p.prev_next = next;
    p.unary_pos = unary_pos;
    p.at_fp = idx < n ? static_cast<uint32_t>(peek_f) : 0;
    p.at_q = idx < n ? static_cast<uint32_t>(peek_q) : 0;
  }
}

RunSplice::RunSplice(const FingerprintRunView& run, std::vector<uint32_t> add)
    : run_(run), add_(std::move(add)), at_(add_.size()) {
  LocateInRun(run_, add_, at_.data());
  CountBits();
}

RunSplice::RunSplice(const FingerprintRunView& run, std::vector<uint32_t> add,
                     std::vector<SplicePoint> at)
    : run_(run), add_(std::move(add)), at_(std::move(at)) {
  CountBits();
}

void RunSplice::CountBits() {
  // Length change (header comment): each addition is a code of its own
  // gap; the code it lands before gets the rest of its old gap.
  const int k = run_.rice_k();
  const uint32_t n = run_.count();
  uint64_t bits = run_.payload_bits();
  for (size_t j = 0; j < add_.size();) {
    const SplicePoint& p = at_[j];
    uint64_t next = p.prev_next;
    for (; j < add_.size() && at_[j].index == p.index; ++j) {
      bits += k + 1 + ((add_[j] - next) >> k);
      next = uint64_t{add_[j]} + 1;
    }
    if (p.index < n) bits += ((p.at_fp - next) >> k) - p.at_q;
  }
  bits_ = bits;
}

void RunSplice::Write(uint64_t* dst, uint64_t dst_offset) const {
  const uint32_t n = run_.count();
  const int k = run_.rice_k();
  const uint64_t mask = (uint64_t{1} << k) - 1;
  const uint64_t* src = run_.words();
  const uint64_t src_rem = run_.bit_offset();
  const uint64_t src_end = src_rem + run_.payload_bits();
  uint64_t rem_pos = dst_offset;
  uint64_t unary_pos = dst_offset + uint64_t{count()} * k;
  // One code of gap d at the write positions (RiceCode::Write's steps).
  auto put = [&](uint64_t d) {
    if (k != 0) {
      const unsigned shift = rem_pos & 63;
      dst[rem_pos >> 6] |= (d & mask) << shift;
      if (shift + k > 64) dst[(rem_pos >> 6) + 1] |= (d & mask) >> (64 - shift);
      rem_pos += k;
    }
    unary_pos += d >> k;  // zeros: the destination starts zeroed
    dst[unary_pos >> 6] |= uint64_t{1} << (unary_pos & 63);
    ++unary_pos;
  };
  // The old codes [copied, i): remainders and unary parts as bits.
  uint32_t copied = 0;
  uint64_t src_unary = src_rem + uint64_t{n} * k;
  auto copy_to = [&](uint32_t i, uint64_t unary_end) {
    const uint64_t rem_bits = uint64_t{i - copied} * k;
    OrBits(src, src_rem + uint64_t{copied} * k, rem_bits, dst, rem_pos);
    rem_pos += rem_bits;
    OrBits(src, src_unary, unary_end - src_unary, dst, unary_pos);
    unary_pos += unary_end - src_unary;
  };
  for (size_t j = 0; j < add_.size();) {
    const SplicePoint& p = at_[j];
    copy_to(p.index, p.unary_pos);
    uint64_t next = p.prev_next;
    for (; j < add_.size() && at_[j].index == p.index; ++j) {
      put(add_[j] - next);
      next = uint64_t{add_[j]} + 1;
    }
    if (p.index < n) {
      put(p.at_fp - next);  // d'': the rest of code index's gap
      copied = p.index + 1;
      src_unary = p.unary_pos + p.at_q + 1;
    } else {
      copied = n;
      src_unary = p.unary_pos;
    }
  }
  copy_to(n, src_end);
}

}  // namespace exposure_filter
