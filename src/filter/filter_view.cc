#include "exposure_filter/filter_view.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"
#include "exposure_filter/bloom_probe.h"
#include "exposure_filter/filter_format.h"
#include "exposure_filter/item_hash.h"
#include "src/filter/bloom_math.h"
#include "src/filter/claim_cost.h"
#include "src/filter/claim_index.h"
#include "src/filter/fingerprint_run.h"
#include "src/filter/item_hash_batch.h"
#include "src/filter/probe_kernel.h"

namespace exposure_filter {
namespace {

uint64_t GetLe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

double GetF64(const unsigned char* p) {
  const uint64_t bits = GetLe(p, 8);
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed filter: ", what));
}

// The empty key is not an item (docs/filter-format.md, "Hashing items"):
// RecordExposure and FilterRecalled reject it, so a local check does too.
absl::Status EmptyKey(absl::string_view field) {
  return absl::InvalidArgumentError(
      absl::StrCat(field,
                   ": empty (an item key is at least 1 byte; the server "
                   "rejects empty keys)"));
}

bool FpRateInRange(double fp) {
  return fp >= format::kMinFpRate && fp <= format::kMaxFpRate;  // NaN: false
}

bool SegmentMayContain(const FilterView::Segment& s, uint64_t h) {
  const unsigned char* block =
      s.blocks + size_t{BlockIndex(h, s.num_blocks)} * kBlockBytes;
  bool all = true;
  ForEachProbe(h, s.k, [&](uint32_t word, uint64_t mask) {
    all &= (GetLe(block + 8 * word, 8) & mask) != 0;
  });
  return all;
}

// P(a fresh item passes every probe) measured from the bits: the mean over
// blocks of (set bits / 512)^k, since a fresh item picks a block uniformly
// and, within it, k probe bits that are (to the probe derivation's accuracy)
// independent uniform positions.
double MeasuredSegmentFpRate(const FilterView::Segment& s) {
  double sum = 0;
  for (uint32_t b = 0; b < s.num_blocks; ++b) {
    int ones = 0;
    for (uint32_t i = 0; i < kBlockBytes; ++i) {
      ones +=
          absl::popcount(static_cast<unsigned>(s.blocks[b * kBlockBytes + i]));
    }
    sum += std::pow(ones / double{kBlockBits}, s.k);
  }
  return sum / s.num_blocks;
}

// Checks a Bloom segment's geometry (both versions).
absl::Status CheckSegment(const FilterView::Segment& s, size_t i) {
  if (s.num_blocks == 0 || s.num_blocks > format::kMaxBlocksPerSegment) {
    return Malformed(absl::StrCat("segment ", i, " block count ", s.num_blocks,
                                  " out of range 1..2^26"));
  }
  if (s.k < kMinProbes || s.k > kMaxProbes) {
    return Malformed(absl::StrCat("segment ", i, " probe count ", s.k,
                                  " out of range 1..16"));
  }
  return absl::OkStatus();
}

constexpr bool kLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

// Whether a run's payload, `len` >= 1 bytes at `payload` inside the received
// bytes [begin, end), can be decoded in place. The decoder reads 64-bit
// words at 8-byte-aligned addresses (as little-endian words: the format's
// bit order), from the one holding the payload's first byte through the
// one after the word holding its last byte (FingerprintRunView's padding
// contract); all of them must lie inside the bytes. The first always does
// (a run starts >= 24 header bytes in, the word at most 7 before it); the
// last fails only for a payload ending within 7 bytes of the trailer, i.e.
// the body's last run when no Bloom blocks follow it: at most one run.
bool ReadableInPlace(const unsigned char* begin, const unsigned char* end,
                     const unsigned char* payload, size_t len) {
  if (!kLittleEndian) return false;
  constexpr uintptr_t kWord = sizeof(uint64_t);
  const uintptr_t first = reinterpret_cast<uintptr_t>(payload) & ~(kWord - 1);
  const uintptr_t last_word =
      reinterpret_cast<uintptr_t>(payload + len - 1) & ~(kWord - 1);
  return first >= reinterpret_cast<uintptr_t>(begin) &&
         last_word + 2 * kWord <= reinterpret_cast<uintptr_t>(end);
}

// The payload's bytes as little-endian 64-bit words, zero-padded, one
// padding word after them (FingerprintRunView's contract).
std::vector<uint64_t> CopyPayload(const unsigned char* payload, size_t len) {
  std::vector<uint64_t> words((len + 7) / 8 + 1, 0);
  if (kLittleEndian) {
    std::memcpy(words.data(), payload, len);
  } else {
    for (size_t i = 0; i < len; ++i) {
      words[i / 8] |= uint64_t{payload[i]} << (8 * (i % 8));
    }
  }
  return words;
}

}  // namespace

FilterView::FilterView() = default;
FilterView::~FilterView() = default;
FilterView::FilterView(const FilterView&) = default;
FilterView& FilterView::operator=(const FilterView&) = default;
FilterView::FilterView(FilterView&&) noexcept = default;
FilterView& FilterView::operator=(FilterView&&) noexcept = default;

absl::StatusOr<FilterView> FilterView::Parse(absl::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  // Both versions start with the magic and a u16 version; the smallest
  // filter of either is its header and the checksum.
  if (bytes.size() < 6 || std::memcmp(p, format::kMagic, 4) != 0) {
    if (bytes.size() < format::kHeader2Bytes + format::kTrailerBytes) {
      return Malformed(
          absl::StrCat("length ", bytes.size(), " is shorter than a header"));
    }
    return Malformed("bad magic");
  }
  const uint64_t version = GetLe(p + 4, 2);
  if (version == format::kVersion1) return ParseV1(bytes);
  if (version == format::kVersion2) return ParseV2(bytes);
  return Malformed(absl::StrCat(
      "unsupported format version ", version,
      ": this decoder reads format versions 1 and 2; upgrade the client "
      "library (docs/filter-format.md) or use FilterRecalled"));
}

absl::StatusOr<FilterView> FilterView::ParseV1(absl::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t size = bytes.size();
  if (size < format::kHeaderBytes + format::kTrailerBytes) {
    return Malformed(absl::StrCat("length ", size, " is shorter than header"));
  }
  if (GetLe(p + 6, 2) != format::kHeaderBytes) {
    return Malformed("unexpected header size");
  }
  if (GetLe(p + 8, 8) != kItemHashSeed || p[20] != format::kHashXxh3_64) {
    return Malformed("unknown hash algorithm or seed");
  }
  if (p[21] != format::kBlockBytesLog2) return Malformed("unknown block size");
  const uint64_t checksum = GetLe(p + size - format::kTrailerBytes, 8);
  if (XXH3_64bits(p, size - format::kTrailerBytes) != checksum) {
    return Malformed("checksum mismatch");
  }
  const uint64_t count = GetLe(p + 16, 4);
  if (count > format::kMaxSegments) {
    return Malformed(absl::StrCat("segment count ", count, " exceeds ",
                                  format::kMaxSegments));
  }
  FilterView view;
  view.format_version_ = format::kVersion1;
  view.checksum_ = checksum;
  view.fp_rate_target_ = GetF64(p + 24);
  if (!FpRateInRange(view.fp_rate_target_)) {
    return Malformed(absl::StrCat("fp target ", view.fp_rate_target_,
                                  " outside [1e-6, 0.5]"));
  }
  // Header sizes are bounded above, so these sums cannot overflow size_t.
  size_t offset = format::kHeaderBytes + count * format::kSegmentHeaderBytes;
  const size_t body_end = size - format::kTrailerBytes;
  if (offset > body_end) return Malformed("truncated segment table");
  for (uint64_t i = 0; i < count; ++i) {
    const unsigned char* h =
        p + format::kHeaderBytes + i * format::kSegmentHeaderBytes;
    Segment s;
    s.start_ms = static_cast<int64_t>(GetLe(h, 8));
    s.end_ms = static_cast<int64_t>(GetLe(h + 8, 8));
    s.num_blocks = static_cast<uint32_t>(GetLe(h + 16, 4));
    s.item_count = static_cast<uint32_t>(GetLe(h + 20, 4));
    s.k = h[24];
    s.level = h[25];
    if (absl::Status st = CheckSegment(s, i); !st.ok()) return st;
    // Event times are non-negative, so are slices; with end > start >= 0
    // the span end - start cannot overflow.
    if (s.start_ms < 0 || s.end_ms <= s.start_ms) {
      return Malformed(absl::StrCat(
          "segment ", i, " does not cover [start_ms, end_ms) with 0 <= start"));
    }
    // Slices: a run of segments sharing start_ms/end_ms, levels 0, 1, ...;
    // slices in ascending start order, all one span, at most 8.
    const bool same_slice =
        !view.slices_.empty() && view.slices_.back().start_ms == s.start_ms;
    if (same_slice) {
      Slice& slice = view.slices_.back();
      if (slice.end_ms != s.end_ms) {
        return Malformed(absl::StrCat(
            "segment ", i, " has its slice's start but not its end"));
      }
      if (s.level != slice.num_segments ||
          slice.num_segments >=
              static_cast<int>(format::kMaxSegmentsPerSlice)) {
        return Malformed(absl::StrCat("segment ", i, " level ", s.level,
                                      " out of order (expected ",
                                      slice.num_segments, ", at most 7)"));
      }
      ++slice.num_segments;
    } else {
      if (s.level != 0) {
        return Malformed(absl::StrCat(
            "segment ", i, " starts a slice at level ", s.level, ", not 0"));
      }
      if (!view.slices_.empty()) {
        if (s.start_ms < view.slices_.back().start_ms) {
          return Malformed(
              absl::StrCat("segment ", i, ": slices not in ascending order"));
        }
        if (s.end_ms - s.start_ms != view.slice_span_ms_) {
          return Malformed(
              absl::StrCat("segment ", i, " spans ", s.end_ms - s.start_ms,
                           " ms, other slices ", view.slice_span_ms_));
        }
      }
      if (view.slices_.size() >= format::kMaxSlices) {
        return Malformed(
            absl::StrCat("more than ", format::kMaxSlices, " slices"));
      }
      view.slice_span_ms_ = s.end_ms - s.start_ms;
      view.slices_.push_back({s.start_ms, s.end_ms,
                              static_cast<int>(view.segments_.size()), 1, 0,
                              0});
    }
    const size_t block_bytes = size_t{s.num_blocks} * kBlockBytes;
    if (block_bytes > body_end - offset) {
      return Malformed(absl::StrCat("segment ", i, " blocks truncated"));
    }
    s.blocks = p + offset;
    offset += block_bytes;
    view.segments_.push_back(s);
  }
  if (offset != body_end) {
    return Malformed(absl::StrCat(body_end - offset, " trailing bytes"));
  }
  return view;
}

absl::StatusOr<FilterView> FilterView::ParseV2(absl::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t size = bytes.size();
  if (size < format::kHeader2Bytes + format::kTrailerBytes) {
    return Malformed(absl::StrCat("length ", size, " is shorter than header"));
  }
  if (p[6] != format::kHashXxh3_64) return Malformed("unknown hash algorithm");
  const size_t body_end = size - format::kTrailerBytes;
  const uint64_t checksum = GetLe(p + body_end, 8);
  if (XXH3_64bits(p, body_end) != checksum) {
    return Malformed("checksum mismatch");
  }
  FilterView view;
  view.format_version_ = format::kVersion2;
  view.checksum_ = checksum;
  const uint32_t num_slices = p[7];
  if (num_slices > format::kMaxSlices) {
    return Malformed(absl::StrCat("slice count ", num_slices, " exceeds ",
                                  format::kMaxSlices));
  }
  view.fp_rate_target_ = GetF64(p + 8);
  if (!FpRateInRange(view.fp_rate_target_)) {
    return Malformed(absl::StrCat("fp target ", view.fp_rate_target_,
                                  " outside [1e-6, 0.5]"));
  }
  const int64_t span = static_cast<int64_t>(GetLe(p + 16, 8));
  if (span < format::kMinSliceSpanMs) {
    return Malformed(absl::StrCat("slice span ", span, " ms below 1000"));
  }
  view.slice_span_ms_ = span;
  // `offset` only grows by lengths checked against `body_end - offset`.
  size_t offset = format::kHeader2Bytes;
  view.slices_.reserve(num_slices);
  std::vector<std::vector<uint64_t>> copied;
  for (uint32_t s = 0; s < num_slices; ++s) {
    if (body_end - offset < format::kSlice2Bytes) {
      return Malformed(absl::StrCat("slice ", s, " header truncated"));
    }
    const unsigned char* h = p + offset;
    offset += format::kSlice2Bytes;
    Slice slice;
    slice.start_ms = static_cast<int64_t>(GetLe(h, 8));
    if (slice.start_ms < 0 || slice.start_ms % span != 0 ||
        slice.start_ms > std::numeric_limits<int64_t>::max() - span) {
      return Malformed(absl::StrCat("slice ", s, " start ", slice.start_ms,
                                    " is not a non-negative multiple of the "
                                    "slice span ",
                                    span));
    }
    if (!view.slices_.empty() &&
        slice.start_ms <= view.slices_.back().start_ms) {
      return Malformed(absl::StrCat("slice ", s,
                                    ": slices not in ascending "
                                    "start order"));
    }
    slice.end_ms = slice.start_ms + span;
    slice.num_segments = h[8];
    slice.num_runs = h[9];
    slice.first_segment = static_cast<int>(view.segments_.size());
    slice.first_run = static_cast<int>(view.runs_.size());
    if (slice.num_segments > static_cast<int>(format::kMaxSegmentsPerSlice) ||
        slice.num_runs > static_cast<int>(format::kMaxRunsPerSlice) ||
        slice.num_segments + slice.num_runs == 0) {
      return Malformed(absl::StrCat("slice ", s, " has ", slice.num_segments,
                                    " Bloom segments and ", slice.num_runs,
                                    " runs (at most 8 segments, not both 0)"));
    }
    if (body_end - offset <
        size_t{format::kSegment2Bytes} * slice.num_segments) {
      return Malformed(absl::StrCat("slice ", s, " segment table truncated"));
    }
    for (int j = 0; j < slice.num_segments; ++j) {
      const unsigned char* e = p + offset;
      offset += format::kSegment2Bytes;
      Segment seg;
      seg.start_ms = slice.start_ms;
      seg.end_ms = slice.end_ms;
      seg.num_blocks = static_cast<uint32_t>(GetLe(e, 4));
      seg.k = e[4];
      seg.level = j;
      if (absl::Status st = CheckSegment(seg, view.segments_.size());
          !st.ok()) {
        return st;
      }
      view.segments_.push_back(seg);
    }
    for (int j = 0; j < slice.num_runs; ++j) {
      const size_t index = view.runs_.size();
      if (body_end - offset < format::kRunLengthBytes) {
        return Malformed(absl::StrCat("run ", index, " length truncated"));
      }
      const uint64_t len = GetLe(p + offset, 4);
      offset += format::kRunLengthBytes;
      if (len > body_end - offset) {
        return Malformed(
            absl::StrCat("run ", index, " of ", len, " bytes truncated"));
      }
      if (len < format::kRunHeaderBytes) {
        return Malformed(absl::StrCat("run ", index, " of ", len,
                                      " bytes is shorter than its ",
                                      format::kRunHeaderBytes, "-byte header"));
      }
      // The run is checked and later decoded where it lies in `bytes`: its
      // payload's bit offset from the aligned word holding its first byte.
      const unsigned char* header = p + offset;
      const unsigned char* payload = header + format::kRunHeaderBytes;
      const size_t payload_bytes = len - format::kRunHeaderBytes;
      const uint64_t* words = nullptr;
      uint64_t bit_offset = 0;
      if (payload_bytes != 0) {
        if (ReadableInPlace(p, p + size, payload, payload_bytes)) {
          const uintptr_t at = reinterpret_cast<uintptr_t>(payload);
          words = reinterpret_cast<const uint64_t*>(
              at & ~uintptr_t{alignof(uint64_t) - 1});
          bit_offset = 8 * (at & (alignof(uint64_t) - 1));
        } else {
          copied.push_back(CopyPayload(payload, payload_bytes));
          words = copied.back().data();  // stays put when `copied` grows
        }
      }
      absl::StatusOr<FingerprintRunView> run =
          FingerprintRunView::FromSerialized(header, words, bit_offset,
                                             payload_bytes);
      if (!run.ok()) {
        return Malformed(
            absl::StrCat("run ", index, ": ", run.status().message()));
      }
      if (run->count() == 0) {
        return Malformed(absl::StrCat("run ", index, " is empty"));
      }
      offset += len;
      view.runs_.push_back({slice.start_ms, slice.end_ms, run->precision(),
                            run->universe(), run->rice_k(), run->count(),
                            static_cast<uint32_t>(payload_bytes)});
      view.run_views_.push_back(*run);
    }
    for (int j = 0; j < slice.num_segments; ++j) {
      Segment& seg = view.segments_[slice.first_segment + j];
      const size_t block_bytes = size_t{seg.num_blocks} * kBlockBytes;
      if (block_bytes > body_end - offset) {
        return Malformed(absl::StrCat("segment ", slice.first_segment + j,
                                      " blocks truncated"));
      }
      seg.blocks = p + offset;
      offset += block_bytes;
    }
    view.slices_.push_back(slice);
  }
  if (offset != body_end) {
    return Malformed(absl::StrCat(body_end - offset, " trailing bytes"));
  }
  if (!copied.empty()) {
    view.copied_runs_ =
        std::make_shared<const std::vector<std::vector<uint64_t>>>(
            std::move(copied));
  }
  // Format 2's variable-length headers leave legacy Bloom blocks at any byte
  // offset; the batch kernel reads 8-byte-aligned words. Copy them once into
  // aligned storage (legacy slices only: they age out within the window).
  size_t words = 0;
  bool aligned = true;
  for (const Segment& seg : view.segments_) {
    words += size_t{seg.num_blocks} * kBlockWords;
    aligned &= reinterpret_cast<uintptr_t>(seg.blocks) % alignof(uint64_t) == 0;
  }
  if (!aligned) {
    auto copy = std::make_shared<std::vector<uint64_t>>(words);
    unsigned char* to = reinterpret_cast<unsigned char*>(copy->data());
    for (Segment& seg : view.segments_) {
      const size_t n = size_t{seg.num_blocks} * kBlockBytes;
      std::memcpy(to, seg.blocks, n);
      seg.blocks = to;
      to += n;
    }
    view.aligned_blocks_ = std::move(copy);
  }
  return view;
}

bool FilterView::MayContainHash(uint64_t item_hash) const {
  for (const Segment& s : segments_) {
    if (SegmentMayContain(s, item_hash)) return true;
  }
  for (const FingerprintRunView& run : run_views_) {
    if (run.Contains(item_hash)) return true;
  }
  return false;
}

bool FilterView::MayContainId(uint64_t id) const {
  return MayContainHash(HashItemId(id));
}

absl::StatusOr<bool> FilterView::MayContainKey(absl::string_view key) const {
  if (key.empty()) return EmptyKey("key");
  return MayContainHash(HashItemKey(std::string_view(key.data(), key.size())));
}

void FilterView::KeepMaskIds(absl::Span<const uint64_t> ids,
                             uint8_t* keep) const {
  // Hash each candidate once (inlined XXH3, as the server's FilterRecalled),
  // then run the batch kernels over the hashes. Scratch reused per thread:
  // no allocation or zero fill per call once grown.
  thread_local std::vector<uint64_t> hashes;
  if (hashes.size() < ids.size()) hashes.resize(ids.size());
  HashItemIds(ids.data(), ids.size(), hashes.data());
  KeepMaskHashes(absl::MakeConstSpan(hashes.data(), ids.size()), keep);
}

absl::Status FilterView::KeepMaskKeys(absl::Span<const std::string> keys,
                                      uint8_t* keep) const {
  std::vector<uint64_t> hashes(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) return EmptyKey(absl::StrCat("keys[", i, "]"));
    hashes[i] = HashItemKey(keys[i]);
  }
  KeepMaskHashes(hashes, keep);
  return absl::OkStatus();
}

void FilterView::KeepMaskHashes(absl::Span<const uint64_t> item_hashes,
                                uint8_t* keep) const {
  KeepMaskBySegments(item_hashes, keep);
  if (run_views_.empty() || item_hashes.empty()) return;
  // Runs: as the server's FilterRecalled (UserFilter::RemoveExposed).
  RemoveClaimedByRuns(run_views_, item_hashes, keep);
}

bool FilterView::FileRuns(ClaimIndex* index, size_t candidates) const {
  return !run_views_.empty() &&
         !BitmapCheaperThanProbe(run_views_, candidates) &&
         index->Build(run_views_);
}

void FilterView::KeepMaskHashes(absl::Span<const uint64_t> item_hashes,
                                uint8_t* keep,
                                const ClaimIndex& runs_index) const {
  KeepMaskBySegments(item_hashes, keep);
  if (run_views_.empty() || item_hashes.empty()) return;
  runs_index.RemoveClaimed(item_hashes, keep);
}

void FilterView::KeepMaskBySegments(absl::Span<const uint64_t> item_hashes,
                                    uint8_t* keep) const {
  const size_t m = item_hashes.size();
  std::fill(keep, keep + m, uint8_t{1});
  if (m == 0) return;
  // Bloom segments: the server's batch kernel. It reads blocks as native
  // 64-bit words, which is the format's little-endian layout only on
  // little-endian hosts, and needs them 8-byte aligned (format 1 from a
  // std::string's buffer is; format 2's are, copied by Parse if need be).
  bool fast = kLittleEndian;
  for (const Segment& s : segments_) {
    fast &= reinterpret_cast<uintptr_t>(s.blocks) % alignof(uint64_t) == 0;
  }
  if (segments_.empty()) {
    // Nothing to probe (a format-2 user with runs only): the kernel would
    // still visit every candidate.
  } else if (fast) {
    absl::InlinedVector<SegmentRef, 16> segs;
    for (const Segment& s : segments_) {
      segs.push_back(SegmentRef{reinterpret_cast<const uint64_t*>(s.blocks),
                                s.num_blocks, s.k});
    }
    RemoveContainedAny(segs.data(), segs.size(), item_hashes.data(), m, keep);
  } else {
    for (size_t i = 0; i < m; ++i) {
      for (const Segment& s : segments_) {
        if (SegmentMayContain(s, item_hashes[i])) {
          keep[i] = 0;
          break;
        }
      }
    }
  }
}

FilterView FilterView::WithSlicesEndingAfter(int64_t ms) const {
  FilterView aged = *this;
  size_t dead = 0;
  while (dead < slices_.size() && slices_[dead].end_ms <= ms) ++dead;
  if (dead == 0) return aged;
  // The live slices' segments and runs follow the dead ones' in the
  // tables (Parse lists them slice by slice).
  const size_t segments =
      dead == slices_.size() ? segments_.size()
                             : static_cast<size_t>(slices_[dead].first_segment);
  const size_t runs = dead == slices_.size()
                          ? runs_.size()
                          : static_cast<size_t>(slices_[dead].first_run);
  aged.slices_.erase(aged.slices_.begin(), aged.slices_.begin() + dead);
  for (Slice& s : aged.slices_) {
    s.first_segment -= static_cast<int>(segments);
    s.first_run -= static_cast<int>(runs);
  }
  aged.segments_.erase(aged.segments_.begin(),
                       aged.segments_.begin() + segments);
  aged.runs_.erase(aged.runs_.begin(), aged.runs_.begin() + runs);
  aged.run_views_.erase(aged.run_views_.begin(),
                        aged.run_views_.begin() + runs);
  return aged;
}

double FilterView::EstimatedFpRate() const {
  // Union of independent sources: 1 - prod(1 - p_i).
  double clean = 1.0;
  for (const Segment& s : segments_) {
    const double p =
        format_version_ == format::kVersion1
            ? BlockedFpRate(static_cast<double>(s.item_count) / s.num_blocks,
                            s.k)
            : MeasuredSegmentFpRate(s);
    clean *= 1.0 - p;
  }
  for (const Run& r : runs_) {
    clean *=
        1.0 - static_cast<double>(r.count) / static_cast<double>(r.universe);
  }
  return std::clamp(1.0 - clean, 0.0, 1.0);
}

}  // namespace exposure_filter
