// RunSplice: adds fingerprints to a Rice-coded run (fingerprint_run.h) by
// splicing their codes into the existing bitstreams instead of decoding the
// run and encoding the union (which re-encoded the whole open run: O(n)
// decode + encode steps per user per call).
//
// A run is two streams: n fixed-width k-bit remainders, then n unary parts.
// Inserting f between f_{i-1} and f_i (f_{-1} + 1 = 0) replaces the gap
//   d_i = f_i - f_{i-1} - 1   by   d' = f - f_{i-1} - 1  and  d'' = f_i - f - 1
// (d' + d'' + 1 = d_i), i.e. code i becomes two codes; several additions in
// one gap chain the same way. Every code between insertion points keeps its
// bits, so it is copied as bits with a shift (bit_words.h OrBits: a word at a
// time), ~n (k + 2) / 64 word operations instead of n decode and n encode
// steps. The result is bit for bit RiceCode{k}.Write of the union at the
// run's k (tests/filter/run_splice_test.cc); its length changes by
//   sum over additions (k + 1 + (d' >> k)) + sum over split codes
//   ((d'' >> k) - (d_i >> k))
// bits. The k stays the run's: the caller decides whether that k is still
// the one it wants (UserFilter keeps open runs at CanonicalRiceK, which moves
// about once per doubling of n, and re-encodes when it does).
//
// Where each addition goes comes from one walk of the run that passes over
// a whole 64-bit word of unary parts at a time while the word's last
// fingerprint is below the next addition. A word holding c codes (its c
// one bits) ends at fingerprint
//   f_last = next + (sum q << k) + sum r + c - 1,
// next = the fingerprint after the last code before the word, sum q = the
// word's zero bits up to its last one (the c unary parts), sum r = the c
// remainders (FieldSummer, bit_words.h: c independent loads and SWAR adds
// instead of c steps of the decoder's serial chain). Only a word after
// which codes remain is skipped this way: then all its one bits are this
// run's, whatever follows the payload.
#ifndef EXPOSURE_FILTER_SRC_FILTER_RUN_SPLICE_H_
#define EXPOSURE_FILTER_SRC_FILTER_RUN_SPLICE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "src/filter/fingerprint_run.h"

namespace exposure_filter {

// Where fingerprint f lies in a run: before code `index`, the first whose
// fingerprint is >= f (count() if none).
struct SplicePoint {
  uint32_t index = 0;
  uint32_t at_fp = 0;      // f_index (index < count)
  uint32_t at_q = 0;       // its unary part's zeros, d_index >> k
  uint64_t prev_next = 0;  // f_{index-1} + 1; 0 at index 0
  uint64_t unary_pos = 0;  // bit of the run's words where code index's
                           // unary part starts (the payload's end if none)
  // Whether the run holds f.
  bool Claims(uint32_t count, uint32_t f) const {
    return index < count && at_fp == f;
  }
};

// out[j] = where sorted_fps[j] lies in `run` (ascending; equal values get
// equal points). One pass over the run; when the values are few (fewer
// than one per kSkipCodes codes) it passes over whole words of codes,
// O(n / codes per word + m), else it decodes code by code.
void LocateInRun(const FingerprintRunView& run,
                 absl::Span<const uint32_t> sorted_fps, SplicePoint* out);

class RunSplice {
 public:
  // The run `run` with `add` inserted: ascending, distinct, each below the
  // run's universe and none in the run (unchecked). `run`'s words must stay
  // readable until Write.
  RunSplice(const FingerprintRunView& run, std::vector<uint32_t> add);
  // Same, with `at` = LocateInRun(run, add) already known (UserFilter's
  // claimed-check of the run computed it: one walk per write).
  RunSplice(const FingerprintRunView& run, std::vector<uint32_t> add,
            std::vector<SplicePoint> at);

  uint32_t count() const {
    return run_.count() + static_cast<uint32_t>(add_.size());
  }
  int rice_k() const { return run_.rice_k(); }
  // Payload bits of the spliced run.
  uint64_t bits() const { return bits_; }
  const FingerprintRunView& run() const { return run_; }
  const std::vector<uint32_t>& added() const { return add_; }

  // ORs the spliced codes into `dst` from bit `dst_offset` on (those bits
  // zero): the same bits as RiceCode{rice_k(), bits()}.Write of the union.
  void Write(uint64_t* dst, uint64_t dst_offset) const;

 private:
  FingerprintRunView run_;
  std::vector<uint32_t> add_;
  std::vector<SplicePoint> at_;  // at_[j]: where add_[j] goes
  uint64_t bits_ = 0;

  void CountBits();
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_RUN_SPLICE_H_
