#include "src/filter/fingerprint_run.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/numeric/bits.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "exposure_filter/filter_format.h"
#include "src/filter/bit_words.h"
#include "src/filter/fingerprint_run_internal.h"

namespace exposure_filter {
namespace {

// The payload stays below 2^32 bits so a skip entry packs a fingerprint and a
// bit offset into one word; 64 bits of margin keep `pos + 64` in range. The
// wire format states the limit in bytes (the payload is shorter than
// format::kMaxRunPayloadBytes), and both the encoder and the decoders check
// it that way, so every run one writes the others read.
constexpr uint64_t kMaxPayloadBits = (uint64_t{1} << 32) - 64;
static_assert(uint64_t{format::kMaxRunPayloadBytes} * 8 == kMaxPayloadBits);
constexpr int kMaxRiceK = 31;  // gaps are < 2^32

absl::Status ValidateShape(int b, uint64_t u) {
  if (b < FingerprintRun::kMinPrecision || b > FingerprintRun::kMaxPrecision) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fingerprint precision %d outside 1..32", b));
  }
  if (u < 2 || u > (uint64_t{1} << b)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fingerprint universe %d outside 2..2^%d", u, b));
  }
  return absl::OkStatus();
}

// The serialized run's 10-byte header (b, k, n, U - 1: docs/filter-format.md)
// checked against itself and the payload length: the checks Parse and
// FromSerialized share, in one order with one wording.
struct WireHeader {
  int b;
  int k;
  uint32_t n;
  uint64_t u;
};

// The error of a run whose code `i` (of `n`) runs past the payload: one
// wording for Parse and FromSerialized, which must refuse the same runs.
absl::Status TruncatedInCode(uint32_t i, uint32_t n, size_t payload_bytes) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "fingerprint run truncated in code %d of %d (%d payload bytes)", i, n,
      payload_bytes));
}

absl::StatusOr<WireHeader> ParseWireHeader(const unsigned char* p,
                                           size_t payload_bytes) {
  auto le32 = [p](size_t at) {
    return uint32_t{p[at]} | uint32_t{p[at + 1]} << 8 |
           uint32_t{p[at + 2]} << 16 | uint32_t{p[at + 3]} << 24;
  };
  const WireHeader h{p[0], p[1], le32(2), uint64_t{le32(6)} + 1};
  if (absl::Status s = ValidateShape(h.b, h.u); !s.ok()) return s;
  if (h.k > kMaxRiceK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Rice parameter %d above %d", h.k, kMaxRiceK));
  }
  if (h.n > h.u) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d distinct fingerprints cannot fit universe %d", h.n, h.u));
  }
  // Before any payload byte is read (docs/filter-format.md's order).
  if (payload_bytes >= format::kMaxRunPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fingerprint run payload of %d bytes is too large (at most %d)",
        payload_bytes, format::kMaxRunPayloadBytes - 1));
  }
  if (h.n == 0 && payload_bytes != 0) {
    return absl::InvalidArgumentError("empty fingerprint run with a payload");
  }
  // Every code has at least k remainder bits and its unary one bit. Checked
  // before anything is allocated, so a 10-byte header claiming 2^32 codes
  // cannot make a reader allocate or scan for them.
  if (uint64_t{h.n} * (h.k + 1) > uint64_t{payload_bytes} * 8) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fingerprint run truncated: %d codes of k = %d need more than %d "
        "payload bytes",
        h.n, h.k, payload_bytes));
  }
  return h;
}

absl::Status ValidateOptions(const FingerprintRun::Options& options) {
  const uint32_t s = options.skip_stride;
  if (s != 0 && (s < 2 || (s & (s - 1)) != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "skip stride %d is neither 0 nor a power of two >= 2", s));
  }
  return absl::OkStatus();
}

// Payload bits of `sorted_distinct` Rice coded with parameter k.
uint64_t CodedBits(absl::Span<const uint32_t> sorted_distinct, int k) {
  uint64_t bits = uint64_t{sorted_distinct.size()} * (k + 1);
  uint64_t next = 0;
  for (uint32_t f : sorted_distinct) {
    bits += (f - next) >> k;
    next = uint64_t{f} + 1;
  }
  return bits;
}

}  // namespace

using fingerprint_run_internal::RunDecoder;

RiceCode RiceCode::Choose(absl::Span<const uint32_t> sorted_distinct,
                          uint64_t u) {
  RiceCode best;
  const size_t n = sorted_distinct.size();
  if (n == 0) return best;
  // The mean gap d is (u - n) / n; Rice is near-optimal at 2^k ~= mean ln 2
  // (header comment). Rounding of the log and the gap distribution's actual
  // shape can make a neighbour shorter, so take the shortest of k-1, k, k+1.
  // A few gaps are no sample of that distribution (one gap is just a number):
  // up to kTryAllBelow codes, trying all 32 costs less than the codes do.
  constexpr size_t kTryAllBelow = 64;
  const double mean_gap = static_cast<double>(u - n) / static_cast<double>(n);
  const double target = mean_gap * std::log(2.0);
  int k0 = target >= 1 ? static_cast<int>(std::floor(std::log2(target))) : 0;
  k0 = std::clamp(k0, 0, kMaxRiceK);
  const int k_lo = n <= kTryAllBelow ? 0 : std::max(0, k0 - 1);
  const int k_hi = n <= kTryAllBelow ? kMaxRiceK : std::min(kMaxRiceK, k0 + 1);
  best.k = -1;
  for (int k = k_lo; k <= k_hi; ++k) {
    const uint64_t bits = CodedBits(sorted_distinct, k);
    if (best.k < 0 || bits < best.bits) {
      best.k = k;
      best.bits = bits;
    }
  }
  return best;
}

RiceCode RiceCode::At(absl::Span<const uint32_t> sorted_distinct, int k) {
  RiceCode code;
  code.k = k;
  code.bits = CodedBits(sorted_distinct, k);
  return code;
}

void RiceCode::Write(absl::Span<const uint32_t> sorted_distinct, uint64_t* w,
                     uint64_t bit_offset) const {
  const size_t n = sorted_distinct.size();
  const uint64_t mask = (uint64_t{1} << k) - 1;
  uint64_t unary_pos = bit_offset + uint64_t{n} * k;  // after the remainders
  uint64_t rem_pos = bit_offset;
  uint64_t next = 0;
  for (uint32_t f : sorted_distinct) {
    const uint64_t d = f - next;
    next = uint64_t{f} + 1;
    if (k != 0) {
      const unsigned shift = rem_pos & 63;
      w[rem_pos >> 6] |= (d & mask) << shift;
      if (shift + k > 64) {
        w[(rem_pos >> 6) + 1] |= (d & mask) >> (64 - shift);
      }
      rem_pos += k;
    }
    unary_pos += d >> k;  // zeros: the destination starts zeroed
    w[unary_pos >> 6] |= uint64_t{1} << (unary_pos & 63);
    ++unary_pos;
  }
}

absl::StatusOr<FingerprintRun> FingerprintRun::Build(
    absl::Span<const uint64_t> item_hashes, int b, uint64_t u,
    Options options) {
  if (absl::Status s = ValidateShape(b, u); !s.ok()) return s;
  std::vector<uint32_t> fps(item_hashes.size());
  for (size_t i = 0; i < fps.size(); ++i) {
    fps[i] = Fingerprint(item_hashes[i], b, u);
  }
  return FromFingerprints(std::move(fps), b, u, options);
}

absl::StatusOr<FingerprintRun> FingerprintRun::FromFingerprints(
    std::vector<uint32_t> fingerprints, int b, uint64_t u, Options options) {
  if (absl::Status s = ValidateShape(b, u); !s.ok()) return s;
  std::sort(fingerprints.begin(), fingerprints.end());
  fingerprints.erase(std::unique(fingerprints.begin(), fingerprints.end()),
                     fingerprints.end());
  if (!fingerprints.empty() && fingerprints.back() >= u) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fingerprint %d outside universe %d", fingerprints.back(), u));
  }
  return Encode(fingerprints, b, u, options);
}

absl::StatusOr<FingerprintRun> FingerprintRun::Encode(
    absl::Span<const uint32_t> sorted_distinct, int b, uint64_t u,
    Options options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  FingerprintRun run;
  run.precision_ = static_cast<uint8_t>(b);
  run.universe_ = u;
  run.skip_stride_ = options.skip_stride;
  const size_t n = sorted_distinct.size();
  if (n == 0) return run;
  // n <= u <= 2^32 distinct values; n = 2^32 would need 2^32 bits anyway.
  if (n > std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError("fingerprint run too large");
  }
  const RiceCode code = RiceCode::Choose(sorted_distinct, u);
  if ((code.bits + 7) / 8 >= format::kMaxRunPayloadBytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "fingerprint run of %d items needs %d bits (its payload must stay "
        "under %d bytes)",
        n, code.bits, format::kMaxRunPayloadBytes));
  }
  run.count_ = static_cast<uint32_t>(n);
  run.rice_k_ = static_cast<uint8_t>(code.k);
  run.payload_bits_ = static_cast<uint32_t>(code.bits);
  const size_t words = run.payload_words() + 1 + run.skip_entries();
  run.words_.reset(new uint64_t[words]());
  code.Write(sorted_distinct, run.words_.get(), 0);
  run.BuildSkipIndex();
  return run;
}

absl::StatusOr<FingerprintRun> FingerprintRun::Parse(std::string_view bytes,
                                                     Options options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  if (bytes.size() < kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fingerprint run truncated: %d bytes, header needs %d",
                        bytes.size(), kHeaderBytes));
  }
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t payload_bytes = bytes.size() - kHeaderBytes;
  absl::StatusOr<WireHeader> header = ParseWireHeader(p, payload_bytes);
  if (!header.ok()) return header.status();
  const int b = header->b;
  const int k = header->k;
  const uint32_t n = header->n;
  const uint64_t u = header->u;
  FingerprintRun run;
  run.precision_ = static_cast<uint8_t>(b);
  run.rice_k_ = static_cast<uint8_t>(k);
  run.universe_ = u;
  run.skip_stride_ = options.skip_stride;
  if (n == 0) return run;
  // Decode into a zeroed buffer one padding word longer than the payload:
  // every peek below is at a position < avail, so it stays inside.
  const uint64_t avail = uint64_t{payload_bytes} * 8;
  run.count_ = n;
  run.payload_bits_ = static_cast<uint32_t>(avail);  // sizes the buffer
  const size_t words = run.payload_words() + 1 + run.skip_entries();
  run.words_.reset(new uint64_t[words]());
  uint64_t* w = run.words_.get();
  for (size_t i = 0; i < payload_bytes; ++i) {  // little-endian words
    w[i / 8] |= uint64_t{p[kHeaderBytes + i]} << (8 * (i % 8));
  }
  const uint64_t mask = (uint64_t{1} << k) - 1;
  const auto truncated = [&](uint32_t i) {
    return TruncatedInCode(i, n, payload_bytes);
  };
  // Remainders first (n * k bits), then n unary parts. The buffer is zero
  // beyond the given bytes, so a set bit found is inside them; every word
  // index checked against the payload's words before it is read.
  const uint64_t remainder_bits = uint64_t{n} * k;
  if (remainder_bits >= avail) return truncated(0);
  const size_t avail_words = run.payload_words();
  uint64_t unary_pos = remainder_bits;
  size_t word = unary_pos >> 6;
  uint64_t ones = w[word] & (~uint64_t{0} << (unary_pos & 63));
  uint64_t next = 0;
  for (uint32_t i = 0; i < n; ++i) {
    while (ones == 0) {
      if (++word >= avail_words) return truncated(i);
      ones = w[word];
    }
    const uint64_t one = (uint64_t{word} << 6) + absl::countr_zero(ones);
    ones &= ones - 1;
    const uint64_t q = one - unary_pos;
    unary_pos = one + 1;
    // d >= q << k must stay below u: also keeps the shift from overflowing.
    if (q > (u >> k)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("fingerprint run code %d leaves universe %d", i, u));
    }
    const uint64_t r = Peek64(w, uint64_t{i} * k) & mask;  // i * k < avail
    const uint64_t f = next + ((q << k) | r);
    if (f >= u) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "fingerprint run code %d: fingerprint %d outside universe %d", i, f,
          u));
    }
    next = f + 1;
  }
  const uint64_t pos = unary_pos;
  if ((pos + 7) / 8 != payload_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fingerprint run has %d payload bytes, its %d codes use %d",
        payload_bytes, n, (pos + 7) / 8));
  }
  if (pos % 8 != 0 && (Peek64(w, pos) & ((uint64_t{1} << (8 - pos % 8)) - 1))) {
    return absl::InvalidArgumentError(
        "fingerprint run padding bits are not zero");
  }
  run.payload_bits_ = static_cast<uint32_t>(pos);
  run.BuildSkipIndex();
  return run;
}

void FingerprintRun::BuildSkipIndex() {
  if (skip_stride_ == 0 || count_ == 0) return;
  uint64_t* entries = words_.get() + payload_words() + 1;
  RunDecoder dec(words_.get(), 0, rice_k_);
  dec.Seek(0, uint64_t{count_} * rice_k_);
  uint64_t next = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    const uint64_t f = next + dec.NextGap();
    if (i % skip_stride_ == 0) {
      entries[i / skip_stride_] = f << 32 | dec.unary_pos();
    }
    next = f + 1;
  }
}

size_t FingerprintRun::heap_bytes() const {
  return words_ ? (payload_words() + 1 + skip_entries()) * sizeof(uint64_t) : 0;
}

void FingerprintRunView::AppendFingerprints(std::vector<uint32_t>* out) const {
  if (count_ == 0) return;
  const size_t old_size = out->size();
  out->resize(old_size + count_);
  DecodeTo(out->data() + old_size);
}

void FingerprintRunView::DecodeTo(uint32_t* out) const {
  // The count in a local: a store through `out` (a uint32_t) may alias
  // count_ as far as the compiler knows, and would reload it per code.
  const uint32_t n = count_;
  if (n == 0) return;
  RunDecoder dec(words_, bit_offset_, rice_k_);
  dec.Seek(0, bit_offset_ + uint64_t{n} * rice_k_);
  uint64_t next = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t f = next + dec.NextGap();
    out[i] = static_cast<uint32_t>(f);
    next = f + 1;
  }
}

void FingerprintRunView::CopyPayloadTo(uint64_t* dst,
                                       uint64_t dst_offset) const {
  if (payload_bits_ == 0) return;
  if (((bit_offset_ ^ dst_offset) & 63) == 0) {
    // Same position in the word (a run that did not move when UserFilter
    // rebuilds its allocation): whole words, the partial ones masked.
    uint64_t src = bit_offset_ >> 6;
    uint64_t to = dst_offset >> 6;
    uint64_t left = payload_bits_;
    const unsigned s = bit_offset_ & 63;
    if (s != 0) {
      const uint64_t n = std::min<uint64_t>(64 - s, left);
      const uint64_t mask = ((uint64_t{1} << n) - 1) << s;  // n <= 63
      dst[to++] |= words_[src++] & mask;
      left -= n;
    }
    const uint64_t full = left >> 6;
    std::memcpy(dst + to, words_ + src, full * sizeof(uint64_t));
    left &= 63;
    if (left != 0) {
      dst[to + full] |= words_[src + full] & ((uint64_t{1} << left) - 1);
    }
    return;
  }
  // 64 bits at a time: OrBits may read the word after the payload's last
  // one (readable by this class's contract); the last chunk is masked.
  OrBits(words_, bit_offset_, payload_bits_, dst, dst_offset);
}

void FingerprintRunView::CopyPayloadBytesTo(unsigned char* dst) const {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "a word's bytes in memory are its little-endian bytes");
  // 64 payload bits per step, read at any bit offset with Peek64 (which may
  // read the word after the payload's last one: readable by this class's
  // contract); the last chunk is masked to its n bits and only its
  // ceil(n / 8) bytes are written.
  uint64_t done = 0;
  for (; done + 64 <= payload_bits_; done += 64) {
    const uint64_t v = Peek64(words_, bit_offset_ + done);
    std::memcpy(dst + done / 8, &v, 8);
  }
  const uint64_t n = payload_bits_ - done;  // 0..63
  if (n != 0) {
    const uint64_t v =
        Peek64(words_, bit_offset_ + done) & ((uint64_t{1} << n) - 1);
    std::memcpy(dst + done / 8, &v, (n + 7) / 8);
  }
}

std::vector<uint32_t> FingerprintRun::Fingerprints() const {
  std::vector<uint32_t> out;
  view().AppendFingerprints(&out);
  return out;
}

absl::StatusOr<FingerprintRun> FingerprintRun::CopyOf(
    const FingerprintRunView& v, Options options) {
  if (absl::Status s = ValidateShape(v.precision(), v.universe()); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  FingerprintRun run;
  run.precision_ = static_cast<uint8_t>(v.precision());
  run.universe_ = v.universe();
  run.skip_stride_ = options.skip_stride;
  if (v.count() == 0) return run;
  run.count_ = v.count();
  run.rice_k_ = static_cast<uint8_t>(v.rice_k());
  run.payload_bits_ = v.payload_bits();
  const size_t words = run.payload_words() + 1 + run.skip_entries();
  run.words_.reset(new uint64_t[words]());
  v.CopyPayloadTo(run.words_.get(), 0);
  run.BuildSkipIndex();
  return run;
}

absl::StatusOr<FingerprintRun> FingerprintRun::Retruncate(
    uint64_t u2, Options options) const {
  if (u2 < 2 || u2 > universe_ || universe_ % u2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot retruncate universe %d to %d: not a divisor >= 2", universe_,
        u2));
  }
  const uint64_t factor = universe_ / u2;
  std::vector<uint32_t> fps = Fingerprints();
  // Division by a constant is monotone: the result is sorted already.
  for (uint32_t& f : fps) f = static_cast<uint32_t>(f / factor);
  fps.erase(std::unique(fps.begin(), fps.end()), fps.end());
  return Encode(fps, precision_, u2, options);
}

absl::StatusOr<FingerprintRun> FingerprintRun::Merge(const FingerprintRun& a,
                                                     const FingerprintRun& b,
                                                     Options options) {
  if (a.precision_ != b.precision_ || a.universe_ != b.universe_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot merge fingerprint runs of (b=%d, U=%d) and (b=%d, U=%d)",
        a.precision_, a.universe_, b.precision_, b.universe_));
  }
  const std::vector<uint32_t> fa = a.Fingerprints();
  const std::vector<uint32_t> fb = b.Fingerprints();
  std::vector<uint32_t> all;
  all.reserve(fa.size() + fb.size());
  std::set_union(fa.begin(), fa.end(), fb.begin(), fb.end(),
                 std::back_inserter(all));
  return Encode(all, a.precision_, a.universe_, options);
}

std::string FingerprintRun::Serialize() const {
  std::string out(kHeaderBytes + encoded_bytes(), '\0');
  auto* p = reinterpret_cast<unsigned char*>(out.data());
  p[0] = precision_;
  p[1] = rice_k_;
  const uint32_t u_minus_1 = static_cast<uint32_t>(universe_ - 1);
  for (int i = 0; i < 4; ++i) {
    p[2 + i] = static_cast<unsigned char>(count_ >> (8 * i));
    p[6 + i] = static_cast<unsigned char>(u_minus_1 >> (8 * i));
  }
  for (size_t i = 0; i < encoded_bytes(); ++i) {
    p[kHeaderBytes + i] =
        static_cast<unsigned char>(words_[i / 8] >> (8 * (i % 8)));
  }
  return out;
}

bool operator==(const FingerprintRun& a, const FingerprintRun& b) {
  return a.precision_ == b.precision_ && a.universe_ == b.universe_ &&
         a.count_ == b.count_ && a.rice_k_ == b.rice_k_ &&
         a.payload_bits_ == b.payload_bits_ &&
         (a.count_ == 0 ||
          std::memcmp(a.words_.get(), b.words_.get(),
                      a.payload_words() * sizeof(uint64_t)) == 0);
}

// FromSerialized accepts what Parse accepts, in O(payload words) instead of
// a decode of every code (Parse also copies the payload into words of its
// own). With n codes of parameter k, remainders in bits [0, n k) of the
// payload and the unary parts after them:
//  * every code is inside the payload iff the unary stream, from bit n k to
//    the payload's end, holds at least n one bits (code i's unary part ends
//    at its i-th one bit; Parse scans exactly those bits, zero beyond); the
//    codes then use the payload's first e + 1 bits, e the n-th one bit;
//  * fingerprints strictly increase (f_i = f_{i-1} + 1 + d_i), so all are
//    < U iff the last one is, and it needs only two sums:
//      f_{n-1} = sum_i d_i + n - 1 = (sum_i q_i) 2^k + sum_i r_i + n - 1,
//    sum_i q_i = (e + 1 - n k) - n, the unary stream's zero bits up to e,
//    and sum_i r_i the remainders' sum (FieldSummer: SWAR adds). Parse's
//    per-code q_i > floor(U / 2^k) rejects a subset of f_i >= U: such a q_i
//    has q_i 2^k >= (floor(U / 2^k) + 1) 2^k > U - 1.
//  No overflow: e + 1 <= 8 payload_bytes < 2^32 and k <= 31 put the first
//  term below 2^63, the remainders' sum below n 2^31 < 2^63.
absl::StatusOr<FingerprintRunView> FingerprintRunView::FromSerialized(
    const unsigned char* header, const uint64_t* words, uint64_t bit_offset,
    size_t payload_bytes) {
  absl::StatusOr<WireHeader> parsed = ParseWireHeader(header, payload_bytes);
  if (!parsed.ok()) return parsed.status();
  const int b = parsed->b;
  const int k = parsed->k;
  const uint32_t n = parsed->n;
  const uint64_t u = parsed->u;
  const uint64_t avail = uint64_t{payload_bytes} * 8;
  if (n == 0) return FingerprintRunView(words, bit_offset, 0, u, b, k, 0);
  const auto truncated = [&](uint32_t i) {
    return TruncatedInCode(i, n, payload_bytes);
  };
  const uint64_t remainder_bits = uint64_t{n} * k;
  if (remainder_bits >= avail) return truncated(0);
  // The n-th one bit of the unary stream, counted a word at a time; the
  // last word is masked at the payload's end (what follows it is not ours).
  const uint64_t end = bit_offset + avail;
  const uint64_t last_word = (end - 1) >> 6;
  uint64_t word = (bit_offset + remainder_bits) >> 6;
  uint64_t bits =
      words[word] & (~uint64_t{0} << ((bit_offset + remainder_bits) & 63));
  uint32_t need = n;  // one bits still to find, >= 1
  for (;;) {
    if (word == last_word && (end & 63) != 0) {
      bits &= (uint64_t{1} << (end & 63)) - 1;
    }
    const uint32_t c = static_cast<uint32_t>(absl::popcount(bits));
    if (c >= need) break;
    need -= c;
    if (word == last_word) return truncated(n - need);
    bits = words[++word];
  }
  for (uint32_t i = 1; i < need; ++i) bits &= bits - 1;
  const uint64_t used = (word << 6) + absl::countr_zero(bits) + 1 - bit_offset;
  if ((used + 7) / 8 != payload_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fingerprint run has %d payload bytes, its %d codes use %d",
        payload_bytes, n, (used + 7) / 8));
  }
  if (used % 8 != 0 && (Peek64(words, bit_offset + used) &
                        ((uint64_t{1} << (8 - used % 8)) - 1)) != 0) {
    return absl::InvalidArgumentError(
        "fingerprint run padding bits are not zero");
  }
  const uint64_t sum_q = used - remainder_bits - n;
  const uint64_t sum_r = k == 0 ? 0 : FieldSummer(k).Sum(words, bit_offset, n);
  const uint64_t f_last = (sum_q << k) + sum_r + n - 1;
  if (f_last >= u) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fingerprint run's last fingerprint %d is outside universe %d", f_last,
        u));
  }
  return FingerprintRunView(words, bit_offset, n, u, b, k,
                            static_cast<uint32_t>(used));
}

}  // namespace exposure_filter
