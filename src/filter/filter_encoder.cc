#include "src/filter/filter_encoder.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <vector>

// XXH3_state_t on the stack needs the static-linking-only declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_format.h"
#include "exposure_filter/filter_format.h"

namespace exposure_filter {
namespace {

// Little-endian field writers into a fixed header buffer.
void PutU16(unsigned char* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void PutU32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void PutU64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// The server never builds a filter the u8 counts cannot carry (UserFilter
// holds at most 255 slices and 8 segments per slice; a slice's run ladder
// stays far below 255 runs, each new run costing a bit of precision, b <=
// 32), so a violation is a bug: stop rather than serve bytes a decoder
// could misread.
[[noreturn]] void FormatBoundViolated(const char* what, size_t value) {
  std::fprintf(stderr, "filter_encoder: %s = %zu exceeds format 2's bound\n",
               what, value);
  std::abort();
}

// Writes format 2's file header for `num_slices` slices at p.
void PutFileHeader(unsigned char* p, size_t num_slices,
                   const FilterPolicy& policy) {
  std::memset(p, 0, format::kHeader2Bytes);
  std::memcpy(p, format::kMagic, 4);
  PutU16(p + 4, format::kVersion2);
  p[6] = format::kHashXxh3_64;
  p[7] = static_cast<unsigned char>(num_slices);
  const double fp = policy.fp_rate();
  uint64_t fp_bits;
  std::memcpy(&fp_bits, &fp, 8);
  PutU64(p + 8, fp_bits);
  PutU64(p + 16, static_cast<uint64_t>(policy.slice_span_ms()));
}

// Walks the live content in format order and hands every byte run to
// `sink(const void*, size_t)`.
template <typename Sink>
void EmitParts(const FilterParts* parts, const FilterPolicy& policy,
               int64_t now_ms, Sink&& sink) {
  struct LiveSlice {
    const SlicePart* slice;
    std::vector<const RunPart*> runs;  // non-empty runs, in order
  };
  std::vector<LiveSlice> live;
  if (parts != nullptr) {
    for (const SlicePart& s : parts->slices) {
      if (!policy.SliceLive(s.index, now_ms)) continue;
      LiveSlice ls{&s, {}};
      for (const RunPart& r : s.runs) {
        if (r.run.count() > 0) ls.runs.push_back(&r);
      }
      if (ls.runs.empty() && s.bloom_segments.empty()) continue;
      if (s.bloom_segments.size() > format::kMaxSegmentsPerSlice) {
        FormatBoundViolated("Bloom segments in a slice",
                            s.bloom_segments.size());
      }
      if (ls.runs.size() > format::kMaxRunsPerSlice) {
        FormatBoundViolated("runs in a slice", ls.runs.size());
      }
      live.push_back(std::move(ls));
    }
  }
  // More than 8 live slices only if the wall clock stepped back past slices
  // already written (FilterPolicy allows at most 8 at any one time). The
  // filter is still encoded whole: decoders refuse it with "slice count
  // exceeds 8" (and the client falls back to FilterRecalled), never answer
  // from part of it. A UserFilter holds at most 255 slices, the u8's range.
  if (live.size() > 255) FormatBoundViolated("live slices", live.size());
  unsigned char header[format::kHeader2Bytes];
  PutFileHeader(header, live.size(), policy);
  sink(header, sizeof(header));

  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "blocks are emitted as in memory: little-endian words");
  for (const LiveSlice& ls : live) {
    const SlicePart& s = *ls.slice;
    unsigned char sh[format::kSlice2Bytes];
    PutU64(sh, static_cast<uint64_t>(policy.SliceStartMs(s.index)));
    sh[8] = static_cast<unsigned char>(s.bloom_segments.size());
    sh[9] = static_cast<unsigned char>(ls.runs.size());
    sink(sh, sizeof(sh));
    for (const BloomSegment& seg : s.bloom_segments) {
      unsigned char e[format::kSegment2Bytes];
      PutU32(e, seg.num_blocks());
      e[4] = static_cast<unsigned char>(seg.k());
      sink(e, sizeof(e));
    }
    for (const RunPart* r : ls.runs) {
      const std::string run = r->run.Serialize();
      unsigned char len[format::kRunLengthBytes];
      PutU32(len, static_cast<uint32_t>(run.size()));
      sink(len, sizeof(len));
      sink(run.data(), run.size());
    }
    for (const BloomSegment& seg : s.bloom_segments) {
      sink(seg.words(), seg.bit_bytes());
    }
  }
}

// GetFilter's path for a UserFilter: the bytes EmitParts produces for
// filter.ToParts(), written straight from the filter's allocation. A run's
// wire form is its header (b, k, n, U - 1) and its Rice payload, and the
// allocation holds exactly that payload with that k (ToParts's CopyOf keeps
// both), only at a bit offset: it is copied 64 bits at a time
// (CopyPayloadBytesTo), never decoded and re-encoded.
// Only a run stored with a tail needs work: ToParts holds the pair merged,
// so the union is encoded here as ToParts does (rare: tails exist only in
// open slices of more than UserFilter::kTailFromItems items).
// Sizes are summed first, so *out is allocated once.
// Returns the checksum (also written as the trailer).
uint64_t EncodeUserFilter(const UserFilter& filter, const FilterPolicy& policy,
                          int64_t now_ms, std::string* out) {
  const UserFilter::LiveSlices live = filter.Live(policy, now_ms);
  // Owners of merged main+tail runs (views point into their heap words).
  std::vector<FingerprintRun> merged;
  size_t max_runs = 0;
  for (const UserFilter::LiveSlice& s : live) max_runs += s.runs.size();
  merged.reserve(max_runs);
  struct Slice {
    const UserFilter::LiveSlice* slice;
    absl::InlinedVector<FingerprintRunView, 2> runs;  // non-empty, in order
  };
  absl::InlinedVector<Slice, 8> slices;
  size_t total = format::kHeader2Bytes + format::kTrailerBytes;
  for (const UserFilter::LiveSlice& s : live) {
    Slice sl{&s, {}};
    for (const UserFilter::LiveRun& r : s.runs) {
      FingerprintRunView v = r.main;
      if (r.tail.count() > 0) {
        std::vector<uint32_t> a, b, all;
        r.main.AppendFingerprints(&a);
        r.tail.AppendFingerprints(&b);
        all.reserve(a.size() + b.size());
        std::set_union(a.begin(), a.end(), b.begin(), b.end(),
                       std::back_inserter(all));
        // Same (b, U) and fingerprints < U: FromFingerprints cannot fail.
        merged.push_back(*FingerprintRun::FromFingerprints(
            std::move(all), r.main.precision(), r.main.universe()));
        v = merged.back().view();
      }
      if (v.count() == 0) continue;
      sl.runs.push_back(v);
      total += format::kRunLengthBytes + FingerprintRun::kHeaderBytes +
               (size_t{v.payload_bits()} + 7) / 8;
    }
    if (sl.runs.empty() && s.bloom_segments.empty()) continue;
    if (s.bloom_segments.size() > format::kMaxSegmentsPerSlice) {
      FormatBoundViolated("Bloom segments in a slice", s.bloom_segments.size());
    }
    if (sl.runs.size() > format::kMaxRunsPerSlice) {
      FormatBoundViolated("runs in a slice", sl.runs.size());
    }
    total += format::kSlice2Bytes;
    for (const BloomSlices::Segment& seg : s.bloom_segments) {
      total += format::kSegment2Bytes + seg.bit_bytes();
    }
    slices.push_back(std::move(sl));
  }
  // See EmitParts on more than 8 live slices.
  if (slices.size() > 255) FormatBoundViolated("live slices", slices.size());

  out->resize(total);
  auto* p = reinterpret_cast<unsigned char*>(out->data());
  PutFileHeader(p, slices.size(), policy);
  p += format::kHeader2Bytes;
  for (const Slice& sl : slices) {
    const UserFilter::LiveSlice& s = *sl.slice;
    PutU64(p, static_cast<uint64_t>(policy.SliceStartMs(s.index)));
    p[8] = static_cast<unsigned char>(s.bloom_segments.size());
    p[9] = static_cast<unsigned char>(sl.runs.size());
    p += format::kSlice2Bytes;
    for (const BloomSlices::Segment& seg : s.bloom_segments) {
      PutU32(p, seg.num_blocks());
      p[4] = static_cast<unsigned char>(seg.k());
      p += format::kSegment2Bytes;
    }
    for (const FingerprintRunView& v : sl.runs) {
      // FingerprintRun::Serialize's layout: u8 b | u8 k | u32 n | u32 U-1 |
      // payload.
      const size_t bytes = (size_t{v.payload_bits()} + 7) / 8;
      PutU32(p, static_cast<uint32_t>(FingerprintRun::kHeaderBytes + bytes));
      p += format::kRunLengthBytes;
      p[0] = static_cast<unsigned char>(v.precision());
      p[1] = static_cast<unsigned char>(v.rice_k());
      PutU32(p + 2, v.count());
      PutU32(p + 6, static_cast<uint32_t>(v.universe() - 1));
      p += FingerprintRun::kHeaderBytes;
      v.CopyPayloadBytesTo(p);
      p += bytes;
    }
    for (const BloomSlices::Segment& seg : s.bloom_segments) {
      std::memcpy(p, seg.words(), seg.bit_bytes());
      p += seg.bit_bytes();
    }
  }
  const uint64_t checksum =
      XXH3_64bits(out->data(), total - format::kTrailerBytes);
  PutU64(p, checksum);
  return checksum;
}

}  // namespace

uint64_t EncodeFilterParts(const FilterParts* parts, const FilterPolicy& policy,
                           int64_t now_ms, std::string* out) {
  out->clear();
  EmitParts(parts, policy, now_ms, [&](const void* p, size_t n) {
    out->append(static_cast<const char*>(p), n);
  });
  const uint64_t checksum = XXH3_64bits(out->data(), out->size());
  unsigned char trailer[format::kTrailerBytes];
  PutU64(trailer, checksum);
  out->append(reinterpret_cast<const char*>(trailer), sizeof(trailer));
  return checksum;
}

uint64_t FilterPartsFingerprint(const FilterParts* parts,
                                const FilterPolicy& policy, int64_t now_ms) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  EmitParts(parts, policy, now_ms,
            [&](const void* p, size_t n) { XXH3_64bits_update(&state, p, n); });
  return XXH3_64bits_digest(&state);
}

uint64_t EncodeFilter(const UserFilter* filter, const FilterPolicy& policy,
                      int64_t now_ms, std::string* out) {
  if (filter == nullptr) return EncodeFilterParts(nullptr, policy, now_ms, out);
  return EncodeUserFilter(*filter, policy, now_ms, out);
}

uint64_t FilterFingerprint(const UserFilter* filter, const FilterPolicy& policy,
                           int64_t now_ms) {
  if (filter == nullptr) return FilterPartsFingerprint(nullptr, policy, now_ms);
  // Building the bytes is the fast way to their checksum too (one
  // allocation, no per-run copies); XXH3's streaming and one-shot forms
  // agree, so this equals FilterPartsFingerprint(ToParts()).
  std::string bytes;
  return EncodeUserFilter(*filter, policy, now_ms, &bytes);
}

std::string FilterVersionString(uint64_t fingerprint) {
  return absl::StrFormat("%016x", fingerprint);
}

}  // namespace exposure_filter
