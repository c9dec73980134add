// FingerprintRun: a Golomb-Rice coded set of sorted fingerprints (a "GCS"),
// the building block of filter format 2 (docs/format2-design.md).
//
// Fingerprints. An item hash h (XXH3-64, item_hash.h) has the fingerprint
//   fp(h) = (prefix_b(h) * U) >> b,   prefix_b(h) = h >> (64 - b),
// for a source precision b in 1..32 and a universe 2 <= U <= 2^b: the
// multiply-shift range reduction of the hash's top b bits onto [0, U), so
// U = 2^b gives the plain b-bit prefix. Two properties make this the right
// reduction rather than `% U`:
//  * it is monotone in the hash: sort the candidates by hash (or by their top
//    32 bits) once, and their fingerprints are sorted for every run of every
//    (b, U) at the same time, which is what ContainsSorted's merge needs;
//  * it truncates exactly: if U2 divides U, floor(fp_U(x) / (U / U2)) =
//    floor(floor(x U / 2^b) / (U / U2)) = floor(x U2 / 2^b) = fp_U2(x) (nested
//    floors of integers), so a run can be re-encoded at a smaller universe
//    (a larger FP rate) without its keys: see Retruncate.
//
// False positives. A fresh hash hits iff its fingerprint is one of the run's
// n distinct fingerprints; each fingerprint owns floor or ceil of 2^b / U
// prefixes, so FP = n / U up to a relative error below U / 2^b. For a target
// eps, U = n / eps.
//
// Encoding. The sorted distinct fingerprints f_0 < f_1 < ... < f_{n-1} are
// stored as gaps d_0 = f_0, d_i = f_i - f_{i-1} - 1 >= 0, each Rice coded with
// parameter k: the k low bits of d, and q = d >> k in unary (q zero bits, a
// one bit). The halves go to two streams, packed LSB first into little-endian
// 64-bit words: first the n remainders, k bits each (remainder i at bit
// i * k), then the n unary parts. Same bits as interleaved codes, but the
// decoder's serial chain is "next set bit" (x &= x - 1; ctz) instead of a
// variable-length code, about 2x faster. The gaps of n uniform
// points in [0, U) are nearly geometric with mean mu ~= U / n, and Rice coding
// a geometric source with 2^k ~= mu ln 2 costs
//   k + 1 + E[q] ~= log2(mu ln 2) + 1 + 1/(e^(2^k/mu) - 1)
//                 = log2(mu) - 0.53 + 1 + 1 = log2(U / n) + 1.47 bits/item
// at 2^k = mu ln 2 exactly; with the best integer k and eps <= 5% (mu >= 20)
// the excess over log2(U / n) ranges over 1.44 .. 1.56 as mu moves between
// powers of two (summing the geometric series numerically); the encoder tries
// k - 1, k, k + 1 and keeps the shortest. The information bound for an
// n-subset of [0, U) is log2 C(U, n) / n ~= log2(U / n) + log2 e = + 1.44, so
// the code is within ~0.1 bits of it; against the FP filter bound
// log2(1/eps) = log2(U / n) it pays ~1.5 bits/item, against a Bloom filter's
// 1.44 log2(1/eps) (blocked: more). Lookups decode sequentially: a batch
// merge is O(n + m), a single lookup O(n) unless the skip index is built.
//
// Memory. One heap block holds the payload words, one zero word of padding
// (the decoder reads 64 bits at any remainder without a bounds check) and
// the optional skip index; the object itself is 32 bytes.
//
// Serialized form (Serialize / Parse), little-endian:
//   u8 b | u8 k | u32 n | u32 U - 1 | ceil(bits / 8) payload bytes
// (remainders, then unary parts), the last byte's unused high bits zero. Parse
// validates everything (ranges, every code inside the payload, fingerprints
// strictly increasing and < U, no trailing bytes or bits) and never reads out
// of bounds.
#ifndef EXPOSURE_FILTER_SRC_FILTER_FINGERPRINT_RUN_H_
#define EXPOSURE_FILTER_SRC_FILTER_FINGERPRINT_RUN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/filter/candidate_sort.h"

namespace exposure_filter {

// A read-only view of one run's Rice codes inside words someone else owns:
// the decoder (single lookups, the sorted merge, listing) shared by
// FingerprintRun (which owns its words) and UserFilter (whose runs live
// packed, at any bit offset, in the user's one allocation).
//
// The codes occupy bits [bit_offset, bit_offset + payload_bits) of `words`
// (LSB first): the count remainders of rice_k bits, then the count unary
// parts. The decoder reads one 64-bit word past the word holding the last
// payload bit without using it, so that word must be readable memory that
// nobody writes concurrently (FingerprintRun keeps a padding word; UserFilter
// its tables).
class FingerprintRunView {
 public:
  FingerprintRunView() = default;
  FingerprintRunView(const uint64_t* words, uint64_t bit_offset, uint32_t count,
                     uint64_t universe, int precision, int rice_k,
                     uint32_t payload_bits, const uint64_t* skip = nullptr,
                     uint32_t skip_stride = 0)
      : words_(words),
        bit_offset_(bit_offset),
        universe_(universe),
        count_(count),
        payload_bits_(payload_bits),
        skip_(skip),
        skip_stride_(skip_stride),
        precision_(static_cast<uint8_t>(precision)),
        rice_k_(static_cast<uint8_t>(rice_k)) {}

  // A run in Serialize()'s form, checked where it lies, with no copy and no
  // allocation (FilterView reads a pulled filter's runs in the received
  // bytes): `header` is its FingerprintRun::kHeaderBytes-byte header; its
  // `payload_bytes` payload bytes are bits [bit_offset, bit_offset +
  // 8 payload_bytes) of `words`. Those words and the one after the last of
  // them must be readable; bits outside the payload may hold anything.
  // Accepts exactly the bytes FingerprintRun::Parse accepts (same ranges,
  // every code inside the payload, every fingerprint < U, no trailing bytes
  // or bits), but without decoding code by code: it counts the unary
  // stream's one bits a word at a time and sums the remainders with SWAR
  // adds, which is all the last fingerprint needs (fingerprint_run.cc has
  // the math). The view reads `words` for as long as it is used.
  static absl::StatusOr<FingerprintRunView> FromSerialized(
      const unsigned char* header, const uint64_t* words, uint64_t bit_offset,
      size_t payload_bytes);

  uint32_t count() const { return count_; }
  uint64_t universe() const { return universe_; }
  int precision() const { return precision_; }
  int rice_k() const { return rice_k_; }
  uint32_t payload_bits() const { return payload_bits_; }
  uint64_t bit_offset() const { return bit_offset_; }
  const uint64_t* words() const { return words_; }

  uint32_t FingerprintOf(uint64_t item_hash) const;
  bool ContainsFingerprint(uint32_t fp) const;
  bool Contains(uint64_t item_hash) const {
    return ContainsFingerprint(FingerprintOf(item_hash));
  }
  // See FingerprintRun::ContainsSorted / RemoveContainedSorted.
  void ContainsSorted(absl::Span<const uint32_t> sorted_fps,
                      uint8_t* member) const;
  void RemoveContainedSorted(absl::Span<const uint64_t> sorted_keys,
                             uint8_t* keep) const;
  // Clears keep[tag] for every candidate whose hash the run contains, as
  // RemoveContainedSorted, from the run's side: each code checks only the
  // candidates of the one or two buckets its fingerprint maps to, with a
  // fixed-width, branch-free check. O(n + m) for the bucket pass (shared by
  // all runs of a request), O(n) per run: what FilterRecalled runs.
  // Ignores the skip index (UserFilter's runs have none).
  void RemoveContained(const BucketedCandidates& candidates,
                       uint8_t* keep) const;
  // Appends all fingerprints, ascending.
  void AppendFingerprints(std::vector<uint32_t>* out) const;
  // Writes all count() fingerprints, ascending, to out[0 .. count()): the
  // same without a vector's bookkeeping per code (the per-request checks
  // decode into scratch sized once).
  void DecodeTo(uint32_t* out) const;
  // ORs the payload into `dst` at bit `dst_offset` (those bits must be zero).
  void CopyPayloadTo(uint64_t* dst, uint64_t dst_offset) const;
  // Writes the payload as Serialize lays it out after its header: exactly
  // encoded_bytes() = ceil(payload_bits / 8) bytes, little-endian, the last
  // byte's unused high bits zero. `dst` needs no alignment. GetFilter's
  // encoder copies a run's wire bytes straight from UserFilter's allocation
  // with it (no decode, no intermediate FingerprintRun).
  void CopyPayloadBytesTo(unsigned char* dst) const;

 private:
  size_t skip_entries() const {
    return skip_stride_ == 0
               ? 0
               : (size_t{count_} + skip_stride_ - 1) / skip_stride_;
  }
  template <typename FpAt, typename OnHit>
  void MergeWalk(size_t m, FpAt fp_at, OnHit on_hit) const;

  const uint64_t* words_ = nullptr;
  uint64_t bit_offset_ = 0;
  uint64_t universe_ = 2;
  uint32_t count_ = 0;
  uint32_t payload_bits_ = 0;
  const uint64_t* skip_ = nullptr;  // entries as FingerprintRun's
  uint32_t skip_stride_ = 0;
  uint8_t precision_ = 1;
  uint8_t rice_k_ = 0;
};

// The Rice code of a sorted distinct fingerprint set, written into words a
// caller owns (UserFilter packs every run of a user into one allocation).
struct RiceCode {
  int k = 0;          // the parameter FingerprintRun::Build would choose
  uint64_t bits = 0;  // payload bits at that k
  // The shortest code of `sorted_distinct` (each < u).
  static RiceCode Choose(absl::Span<const uint32_t> sorted_distinct,
                         uint64_t u);
  // The code of `sorted_distinct` at parameter k (0..31).
  static RiceCode At(absl::Span<const uint32_t> sorted_distinct, int k);
  // ORs the codes into `dst` from bit `bit_offset` on (those bits zero).
  void Write(absl::Span<const uint32_t> sorted_distinct, uint64_t* dst,
             uint64_t bit_offset) const;
};

struct FingerprintRunOptions {
  // Skip index stride (0 or a power of two >= 2): one entry (fingerprint, bit
  // offset) per this many codes; 0 = no index. A single Contains then decodes
  // at most stride - 1 codes after a binary search over n / stride entries,
  // for 8 bytes per stride codes (64: 1 bit/item).
  uint32_t skip_stride = 0;
};

class FingerprintRun {
 public:
  static constexpr int kMinPrecision = 1;
  static constexpr int kMaxPrecision = 32;
  // Bytes of Serialize()'s header before the payload.
  static constexpr size_t kHeaderBytes = 10;
  using Options = FingerprintRunOptions;

  // The fingerprint of `item_hash` for precision `b` and universe `u`
  // (unchecked: 1 <= b <= 32, 2 <= u <= 2^b).
  static uint32_t Fingerprint(uint64_t item_hash, int b, uint64_t u) {
    return static_cast<uint32_t>(((item_hash >> (64 - b)) * u) >> b);
  }
  // Key for RemoveContainedSorted: the hash's top 32 bits (all any run's
  // fingerprint depends on, b <= 32) above a caller's 32-bit tag. Sorting
  // these keys sorts the candidates by fingerprint for every run at once.
  static uint64_t SortKey(uint64_t item_hash, uint32_t tag) {
    return (item_hash & ~uint64_t{0xffffffff}) | tag;
  }

  // An owned copy of `view`'s run (same codes; skip index per `options`).
  static absl::StatusOr<FingerprintRun> CopyOf(const FingerprintRunView& view,
                                               Options options = {});

  // The run of the distinct fingerprints of `item_hashes` (any order,
  // duplicates allowed). InvalidArgument unless 1 <= b <= 32 and
  // 2 <= u <= 2^b; ResourceExhausted if the payload would reach
  // format::kMaxRunPayloadBytes (2^32 - 64 bits).
  static absl::StatusOr<FingerprintRun> Build(
      absl::Span<const uint64_t> item_hashes, int b, uint64_t u,
      Options options = {});
  // Same from fingerprints already reduced (each < u; any order).
  static absl::StatusOr<FingerprintRun> FromFingerprints(
      std::vector<uint32_t> fingerprints, int b, uint64_t u,
      Options options = {});
  // Decodes Serialize()'s bytes; InvalidArgument for anything malformed.
  static absl::StatusOr<FingerprintRun> Parse(std::string_view bytes,
                                              Options options = {});

  FingerprintRun() = default;
  FingerprintRun(FingerprintRun&&) noexcept = default;
  FingerprintRun& operator=(FingerprintRun&&) noexcept = default;

  uint32_t count() const { return count_; }
  uint64_t universe() const { return universe_; }
  int precision() const { return precision_; }
  int rice_k() const { return rice_k_; }
  uint32_t skip_stride() const { return skip_stride_; }
  uint32_t payload_bits() const { return payload_bits_; }
  // Exact size of the Rice codes: what a wire format stores for this run.
  size_t encoded_bytes() const { return (size_t{payload_bits_} + 7) / 8; }
  // Heap bytes this object owns (payload words + padding word + skip index);
  // add sizeof(FingerprintRun) for the all-in size.
  size_t heap_bytes() const;
  // Expected FP rate of a fresh item: count() / universe().
  double FpRate() const {
    return static_cast<double>(count_) / static_cast<double>(universe_);
  }

  // This run as a view (valid while the run lives and is not moved from).
  FingerprintRunView view() const {
    return FingerprintRunView(
        words_.get(), 0, count_, universe_, precision_, rice_k_, payload_bits_,
        skip_stride_ == 0 ? nullptr : skip(), skip_stride_);
  }

  uint32_t FingerprintOf(uint64_t item_hash) const {
    return Fingerprint(item_hash, precision_, universe_);
  }
  bool ContainsFingerprint(uint32_t fp) const {
    return view().ContainsFingerprint(fp);
  }
  bool Contains(uint64_t item_hash) const {
    return ContainsFingerprint(FingerprintOf(item_hash));
  }

  // member[i] = 1 if sorted_fps[i] is in the run, else 0. `sorted_fps` must
  // be ascending (duplicates allowed); one merge pass, each code decoded at
  // most once (skipped over by the index when there is one).
  void ContainsSorted(absl::Span<const uint32_t> sorted_fps,
                      uint8_t* member) const {
    view().ContainsSorted(sorted_fps, member);
  }
  // The service's shape: `sorted_keys` are SortKey(hash, tag) in ascending
  // order; clears keep[tag] for every key whose hash the run contains.
  void RemoveContainedSorted(absl::Span<const uint64_t> sorted_keys,
                             uint8_t* keep) const {
    view().RemoveContainedSorted(sorted_keys, keep);
  }

  // The same set at universe u2 = universe() / f for an integer f: equal to
  // Build(same hashes, precision(), u2) (see the header comment).
  // InvalidArgument unless 2 <= u2 <= universe() and u2 divides universe().
  absl::StatusOr<FingerprintRun> Retruncate(uint64_t u2,
                                            Options options = {}) const;
  // The union of two runs of the same (b, U); InvalidArgument otherwise.
  static absl::StatusOr<FingerprintRun> Merge(const FingerprintRun& a,
                                              const FingerprintRun& b,
                                              Options options = {});

  // All fingerprints, ascending.
  std::vector<uint32_t> Fingerprints() const;
  std::string Serialize() const;

  // Same set, same encoding (the skip index is not compared).
  friend bool operator==(const FingerprintRun& a, const FingerprintRun& b);
  friend bool operator!=(const FingerprintRun& a, const FingerprintRun& b) {
    return !(a == b);
  }

 private:
  struct WordsFree {
    void operator()(uint64_t* p) const { delete[] p; }
  };
  size_t payload_words() const { return (size_t{payload_bits_} + 63) / 64; }
  size_t skip_entries() const {
    return skip_stride_ == 0
               ? 0
               : (size_t{count_} + skip_stride_ - 1) / skip_stride_;
  }
  // Skip entry j: f_{j*stride} << 32 | bit offset of the unary part of code
  // j*stride + 1.
  const uint64_t* skip() const { return words_.get() + payload_words() + 1; }
  static absl::StatusOr<FingerprintRun> Encode(
      absl::Span<const uint32_t> sorted_distinct, int b, uint64_t u,
      Options options);
  void BuildSkipIndex();

  std::unique_ptr<uint64_t[], WordsFree> words_;
  uint64_t universe_ = 2;
  uint32_t count_ = 0;
  uint32_t payload_bits_ = 0;
  uint32_t skip_stride_ = 0;
  uint8_t precision_ = 1;
  uint8_t rice_k_ = 0;
};

inline uint32_t FingerprintRunView::FingerprintOf(uint64_t item_hash) const {
  return FingerprintRun::Fingerprint(item_hash, precision_, universe_);
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_FINGERPRINT_RUN_H_
