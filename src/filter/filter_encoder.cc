#include "src/filter/filter_encoder.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

// XXH3_state_t on the stack needs the static-linking-only declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

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
  unsigned char header[format::kHeader2Bytes] = {};
  std::memcpy(header, format::kMagic, 4);
  PutU16(header + 4, format::kVersion2);
  header[6] = format::kHashXxh3_64;
  header[7] = static_cast<unsigned char>(live.size());
  const double fp = policy.fp_rate();
  uint64_t fp_bits;
  std::memcpy(&fp_bits, &fp, 8);
  PutU64(header + 8, fp_bits);
  PutU64(header + 16, static_cast<uint64_t>(policy.slice_span_ms()));
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
  const FilterParts parts = filter->ToParts();
  return EncodeFilterParts(&parts, policy, now_ms, out);
}

uint64_t FilterFingerprint(const UserFilter* filter, const FilterPolicy& policy,
                           int64_t now_ms) {
  if (filter == nullptr) return FilterPartsFingerprint(nullptr, policy, now_ms);
  const FilterParts parts = filter->ToParts();
  return FilterPartsFingerprint(&parts, policy, now_ms);
}

std::string FilterVersionString(uint64_t fingerprint) {
  return absl::StrFormat("%016x", fingerprint);
}

}  // namespace exposure_filter
