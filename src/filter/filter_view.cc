#include "exposure_filter/filter_view.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "exposure_filter/bloom_probe.h"
#include "exposure_filter/filter_format.h"
#include "exposure_filter/item_hash.h"
#include "src/filter/bloom_math.h"
#include "src/filter/probe_kernel.h"

namespace exposure_filter {
namespace {

uint64_t GetLe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed filter: ", what));
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

}  // namespace

absl::StatusOr<FilterView> FilterView::Parse(absl::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t size = bytes.size();
  if (size < format::kHeaderBytes + format::kTrailerBytes) {
    return Malformed(absl::StrCat("length ", size, " is shorter than header"));
  }
  if (std::memcmp(p, format::kMagic, 4) != 0) return Malformed("bad magic");
  const uint64_t version = GetLe(p + 4, 2);
  if (version != format::kVersion) {
    return Malformed(absl::StrCat("unsupported format version ", version));
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
  view.checksum_ = checksum;
  const uint64_t fp_bits = GetLe(p + 24, 8);
  std::memcpy(&view.fp_rate_target_, &fp_bits, 8);
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
    if (s.num_blocks == 0 || s.num_blocks > format::kMaxBlocksPerSegment) {
      return Malformed(absl::StrCat("segment ", i, " block count ",
                                    s.num_blocks, " out of range"));
    }
    if (s.k < kMinProbes || s.k > kMaxProbes) {
      return Malformed(
          absl::StrCat("segment ", i, " probe count ", s.k, " out of range"));
    }
    if (s.end_ms < s.start_ms) {
      return Malformed(absl::StrCat("segment ", i, " ends before it starts"));
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

bool FilterView::MayContainHash(uint64_t item_hash) const {
  for (const Segment& s : segments_) {
    if (SegmentMayContain(s, item_hash)) return true;
  }
  return false;
}

bool FilterView::MayContainId(uint64_t id) const {
  return MayContainHash(HashItemId(id));
}

bool FilterView::MayContainKey(absl::string_view key) const {
  return MayContainHash(HashItemKey(std::string_view(key.data(), key.size())));
}

void FilterView::KeepMaskIds(absl::Span<const uint64_t> ids,
                             uint8_t* keep) const {
  // Hash each candidate once, then run the batch kernel over the hashes.
  std::vector<uint64_t> hashes(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) hashes[i] = HashItemId(ids[i]);
  KeepMaskHashes(hashes, keep);
}

void FilterView::KeepMaskKeys(absl::Span<const std::string> keys,
                              uint8_t* keep) const {
  for (size_t i = 0; i < keys.size(); ++i) keep[i] = !MayContainKey(keys[i]);
}

void FilterView::KeepMaskHashes(absl::Span<const uint64_t> item_hashes,
                                uint8_t* keep) const {
  // The server's batch kernel, segment by segment. It reads blocks as native
  // 64-bit words, which is the format's little-endian layout only on
  // little-endian hosts, and needs them 8-byte aligned (a std::string's
  // buffer, plus the 32-byte headers, is).
  bool fast = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
  for (const Segment& s : segments_) {
    fast &= reinterpret_cast<uintptr_t>(s.blocks) % alignof(uint64_t) == 0;
  }
  if (!fast) {
    for (size_t i = 0; i < item_hashes.size(); ++i) {
      keep[i] = !MayContainHash(item_hashes[i]);
    }
    return;
  }
  std::fill(keep, keep + item_hashes.size(), uint8_t{1});
  absl::InlinedVector<SegmentRef, 16> segs;
  for (const Segment& s : segments_) {
    segs.push_back(SegmentRef{reinterpret_cast<const uint64_t*>(s.blocks),
                              s.num_blocks, s.k});
  }
  RemoveContainedAny(segs.data(), segs.size(), item_hashes.data(),
                     item_hashes.size(), keep);
}

double FilterView::EstimatedFpRate() const {
  double clean = 1.0;
  for (const Segment& s : segments_) {
    clean *= 1.0 - BlockedFpRate(
                       static_cast<double>(s.item_count) / s.num_blocks, s.k);
  }
  return 1.0 - clean;
}

}  // namespace exposure_filter
