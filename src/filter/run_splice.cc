// Splicing fingerprints into a Rice-coded run: run_splice.h.
#include "src/filter/run_splice.h"

#include <cstring>
#include <utility>

#include "absl/base/optimization.h"
#include "absl/numeric/bits.h"
#include "src/filter/bit_words.h"

namespace exposure_filter {
namespace {
// Word skips pay only while additions are sparse: a word of unary parts
// holds ~64 / (1 + E[q]) ~= 30-40 codes at the k runs get, and a failed
// skip (the word holds an addition's position) costs a popcount and a
// remainder sum for nothing. Below one addition per this many codes the
// walk decodes code by code.
constexpr uint64_t kSkipCodes = 64;

// Dense additions: a merge of the codes, decoded one by one in a tight loop
// (the decoder's chain, fingerprint_run_internal.h RunDecoder), against the
// additions: each addition x gets the first code whose fingerprint is >= x.
void LocateDense(const FingerprintRunView& run,
                 absl::Span<const uint32_t> sorted_fps, SplicePoint* out) {
  const uint32_t n = run.count();
  const int k = run.rice_k();
  const uint64_t* words = run.words();
  const uint64_t mask = (uint64_t{1} << k) - 1;
  const size_t m = sorted_fps.size();
  if (m == 0) return;
  // Remainder i is one unaligned 8-byte load at byte rem_pos / 8, shifted
  // by rem_pos % 8: >= 57 valid bits >= k. Its last byte lies in word
  // rem_pos / 64 + 1 at most, what Peek64 reads too (the view's contract).
  const auto* rem_bytes = reinterpret_cast<const unsigned char*>(words);
  uint64_t rem_pos = run.bit_offset();
  uint64_t unary_pos = rem_pos + uint64_t{n} * k;
  uint64_t word = unary_pos >> 6;
  uint64_t bits = n == 0 ? 0 : words[word] & (~uint64_t{0} << (unary_pos & 63));
  uint64_t next = 0;
  size_t j = 0;
  uint64_t x = sorted_fps[0];  // the next addition to place
  for (uint32_t idx = 0; idx < n; ++idx) {
    while (bits == 0) bits = words[++word];
    const uint64_t one = (word << 6) + absl::countr_zero(bits);
    bits &= bits - 1;
    const uint64_t q = one - unary_pos;
    uint64_t r;
    std::memcpy(&r, rem_bytes + (rem_pos >> 3), sizeof(r));
    // k = 0: mask 0 (the load stays inside: the payload's first bytes).
    const uint64_t f = next + ((q << k) | ((r >> (rem_pos & 7)) & mask));
    if (ABSL_PREDICT_FALSE(f >= x)) {
      do {
        out[j] = {idx, static_cast<uint32_t>(f), static_cast<uint32_t>(q), next,
                  unary_pos};
        if (++j == m) return;
        x = sorted_fps[j];
      } while (x <= f);
    }
    rem_pos += k;
    unary_pos = one + 1;
    next = f + 1;
  }
  for (; j < m; ++j) out[j] = {n, 0, 0, next, unary_pos};
}

}  // namespace

// The decoder state: `idx` codes consumed, the next fingerprint at least
// `next`, code idx's unary part from `unary_pos` on, `bits` holding the ones
// of word `word` from there. Code idx is decoded ("peeked") without being
// consumed, so that the additions before it all get its point. The word
// skip's math: run_splice.h.
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
  uint64_t failed_word = ~uint64_t{0};
  bool peeked = false;  // code idx decoded into peek_*
  uint64_t peek_one = 0, peek_f = 0, peek_q = 0;
  for (size_t j = 0; j < sorted_fps.size(); ++j) {
    const uint64_t x = sorted_fps[j];
    while (idx < n) {
      if (!peeked) {
        // Codes remain, so a one bit lies ahead.
        while (bits == 0) bits = words[++word];
        // The whole word if its last fingerprint is below x. Only when codes
        // remain after the word's ones: then all of them are this run's.
        const uint32_t c = word != failed_word
                               ? static_cast<uint32_t>(absl::popcount(bits))
                               : 0;
        if (c != 0 && idx + c < n) {
          const uint64_t last = (word << 6) + 63 - absl::countl_zero(bits);
          const uint64_t sum_q = last + 1 - unary_pos - c;
          const uint64_t sum_r =
              k == 0 ? 0 : summer.Sum(words, rem_base + uint64_t{idx} * k, c);
          const uint64_t f_last = next + (sum_q << k) + sum_r + c - 1;
          if (f_last < x) {
            next = f_last + 1;
            idx += c;
            unary_pos = last + 1;
            bits = words[++word];
            continue;
          }
          failed_word = word;
        }
        peek_one = (word << 6) + absl::countr_zero(bits);
        peek_q = peek_one - unary_pos;
        const uint64_t r =
            k == 0 ? 0 : Peek64(words, rem_base + uint64_t{idx} * k) & mask;
        peek_f = next + ((peek_q << k) | r);
        peeked = true;
      }
      if (peek_f >= x) break;
      bits &= bits - 1;  // consume code idx
      next = peek_f + 1;
      unary_pos = peek_one + 1;
      ++idx;
      peeked = false;
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
