#include "src/filter/filter_encoder.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

// XXH3_state_t on the stack needs the static-linking-only declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "absl/strings/str_format.h"
#include "exposure_filter/filter_format.h"
#include "exposure_filter/item_hash.h"

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

// Walks the live segments in format order and hands every byte run to
// `sink(const void*, size_t)`.
//
// INTERIM (f2core, until f2wire's format 2 lands): format 1 cannot carry
// fingerprint runs, so a slice holding runs is sent as ONE saturated block
// (every bit set, k = 1) whose count is the runs' item count: a format-1
// client then treats every candidate of that slice's time as exposed. Never
// a false negative, but no filtering on the client for those slices.
template <typename Sink>
void EmitFilter(const UserFilter* filter, const FilterPolicy& policy,
                int64_t now_ms, Sink&& sink) {
  static const uint64_t kSaturated[kBlockWords] = {
      ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0},
      ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
  struct LiveSegment {
    int64_t slice_index;
    const uint64_t* words;
    uint32_t num_blocks;
    uint64_t count;
    int k;
    int level;
  };
  std::vector<LiveSegment> live;
  FilterParts parts;
  if (filter != nullptr) parts = filter->ToParts();
  for (const SlicePart& s : parts.slices) {
    if (!policy.SliceLive(s.index, now_ms)) continue;
    int level = 0;
    for (const BloomSegment& seg : s.bloom_segments) {
      if (level == FilterPolicy::kMaxSegmentsPerSlice - 1 && !s.runs.empty()) {
        break;  // room for the runs' block
      }
      live.push_back({s.index, seg.words(), seg.num_blocks(), seg.count(),
                      seg.k(), level++});
    }
    if (!s.runs.empty()) {
      uint64_t count = 0;
      for (const RunPart& r : s.runs) count += r.run.count();
      live.push_back({s.index, kSaturated, 1, count, 1, level++});
    }
  }
  unsigned char header[format::kHeaderBytes] = {};
  std::memcpy(header, format::kMagic, 4);
  PutU16(header + 4, format::kVersion);
  PutU16(header + 6, format::kHeaderBytes);
  PutU64(header + 8, kItemHashSeed);
  PutU32(header + 16, static_cast<uint32_t>(live.size()));
  header[20] = format::kHashXxh3_64;
  header[21] = format::kBlockBytesLog2;
  const double fp = policy.fp_rate();
  uint64_t fp_bits;
  std::memcpy(&fp_bits, &fp, 8);
  PutU64(header + 24, fp_bits);
  sink(header, sizeof(header));

  for (const LiveSegment& ls : live) {
    unsigned char seg[format::kSegmentHeaderBytes] = {};
    PutU64(seg + 0, static_cast<uint64_t>(policy.SliceStartMs(ls.slice_index)));
    PutU64(seg + 8, static_cast<uint64_t>(policy.SliceEndMs(ls.slice_index)));
    PutU32(seg + 16, ls.num_blocks);
    const uint64_t count =
        std::min<uint64_t>(ls.count, std::numeric_limits<uint32_t>::max());
    PutU32(seg + 20, static_cast<uint32_t>(count));
    seg[24] = static_cast<unsigned char>(ls.k);
    seg[25] = static_cast<unsigned char>(ls.level);
    sink(seg, sizeof(seg));
  }
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "blocks are emitted as in memory: little-endian words");
  for (const LiveSegment& ls : live) {
    sink(ls.words, size_t{ls.num_blocks} * kBlockBytes);
  }
}

}  // namespace

uint64_t EncodeFilter(const UserFilter* filter, const FilterPolicy& policy,
                      int64_t now_ms, std::string* out) {
  out->clear();
  EmitFilter(filter, policy, now_ms, [&](const void* p, size_t n) {
    out->append(static_cast<const char*>(p), n);
  });
  const uint64_t checksum = XXH3_64bits(out->data(), out->size());
  unsigned char trailer[format::kTrailerBytes];
  PutU64(trailer, checksum);
  out->append(reinterpret_cast<const char*>(trailer), sizeof(trailer));
  return checksum;
}

uint64_t FilterFingerprint(const UserFilter* filter, const FilterPolicy& policy,
                           int64_t now_ms) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  EmitFilter(filter, policy, now_ms, [&](const void* p, size_t n) {
    XXH3_64bits_update(&state, p, n);
  });
  return XXH3_64bits_digest(&state);
}

std::string FilterVersionString(uint64_t fingerprint) {
  return absl::StrFormat("%016x", fingerprint);
}

}  // namespace exposure_filter
