#include "src/persist/snapshot_user_record.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "exposure_filter/bloom_probe.h"
#include "src/filter/fingerprint_run.h"
#include "src/persist/byte_codec.h"

namespace exposure_filter {
namespace {

// Bounds the decoder enforces (the writer stays far inside them).
constexpr uint32_t kMaxBlocks = uint32_t{1} << 26;  // portable format's
constexpr int kMaxSlices = 64;

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

}  // namespace

bool EncodeUserParts(uint16_t surface_id, absl::string_view user_id,
                     const FilterParts& parts, const FilterPolicy& policy,
                     int64_t now_ms, std::string* body) {
  int live = 0;
  for (const SlicePart& s : parts.slices) {
    live += policy.SliceLive(s.index, now_ms) ? 1 : 0;
  }
  if (live == 0) return false;
  PutU16(body, surface_id);
  PutString32(body, user_id);
  PutU8(body, static_cast<uint8_t>(live));
  for (const SlicePart& s : parts.slices) {
    if (!policy.SliceLive(s.index, now_ms)) continue;
    PutI64(body, s.index);
    PutI64(body, s.min_event_ms);
    PutI64(body, s.max_event_ms);
    PutU8(body, static_cast<uint8_t>(s.bloom_segments.size()));
    for (const BloomSegment& seg : s.bloom_segments) {
      PutU32(body, seg.num_blocks());
      PutU8(body, static_cast<uint8_t>(seg.k()));
      PutU64(body, seg.count());
      PutU64(body, seg.capacity());
      // Words are little-endian in memory on every platform we build for
      // (x86-64, aarch64), which is the file's byte order.
      body->append(reinterpret_cast<const char*>(seg.words()), seg.bit_bytes());
    }
    PutU8(body, static_cast<uint8_t>(s.runs.size()));
    for (const RunPart& r : s.runs) {
      const std::string run = r.run.Serialize();
      PutU32(body, r.capacity);
      PutU8(body, r.open ? 1 : 0);
      PutU32(body, static_cast<uint32_t>(run.size()));
      body->append(run);
    }
  }
  return true;
}

bool EncodeUserRecord(uint16_t surface_id, absl::string_view user_id,
                      const UserFilter& filter, const FilterPolicy& policy,
                      int64_t now_ms, std::string* body) {
  if (!filter.HasLiveSlices(policy, now_ms)) return false;
  return EncodeUserParts(surface_id, user_id, filter.ToParts(), policy, now_ms,
                         body);
}

absl::StatusOr<DecodedUserRecord> DecodeUserRecord(uint8_t type,
                                                   absl::string_view body) {
  if (type != kSnapshotUserRecordV1 && type != kSnapshotUserRecordV2) {
    return Bad(absl::StrCat("record type ", type, " is not a User record"));
  }
  const bool v2 = type == kSnapshotUserRecordV2;
  ByteReader r(body);
  DecodedUserRecord out;
  uint8_t slices = 0;
  if (!r.U16(&out.surface_id) || !r.String32(&out.user_id)) {
    return Bad("surface id or user id truncated");
  }
  if (out.user_id.empty()) return Bad("empty user id");
  if (!r.U8(&slices) || slices == 0 || slices > kMaxSlices) {
    return Bad(
        absl::StrCat("slice count ", slices, " outside 1..", kMaxSlices));
  }
  int64_t prev_index = std::numeric_limits<int64_t>::min();
  for (int i = 0; i < slices; ++i) {
    SlicePart slice;
    uint8_t segments = 0, runs = 0;
    if (!r.I64(&slice.index) || !r.I64(&slice.min_event_ms) ||
        !r.I64(&slice.max_event_ms) || !r.U8(&segments)) {
      return Bad(absl::StrCat("slice ", i, " header truncated"));
    }
    if (slice.index <= prev_index) {
      return Bad(absl::StrCat("slice ", i, " index not ascending"));
    }
    prev_index = slice.index;
    if (segments > FilterPolicy::kMaxSegmentsPerSlice ||
        (!v2 && segments == 0)) {
      return Bad(
          absl::StrCat("slice ", i, " holds ", segments, " Bloom segments"));
    }
    for (int j = 0; j < segments; ++j) {
      uint32_t blocks = 0;
      uint8_t k = 0;
      uint64_t count = 0, capacity = 0;
      absl::string_view bits;
      if (!r.U32(&blocks) || !r.U8(&k) || !r.U64(&count) || !r.U64(&capacity)) {
        return Bad(absl::StrCat("slice ", i, " segment ", j, " truncated"));
      }
      if (blocks == 0 || blocks > kMaxBlocks || k < kMinProbes ||
          k > kMaxProbes || capacity == 0) {
        return Bad(absl::StrCat("slice ", i, " segment ", j, ": blocks ",
                                blocks, ", k ", k, ", capacity ", capacity,
                                " out of range"));
      }
      if (!r.Bytes(size_t{blocks} * kBlockBytes, &bits)) {
        return Bad(
            absl::StrCat("slice ", i, " segment ", j, " bits truncated"));
      }
      BloomSegment seg(blocks, k, capacity);
      // memcpy underneath: the mapped bytes need not be aligned.
      seg.Assign(reinterpret_cast<const uint64_t*>(bits.data()), count);
      slice.bloom_segments.push_back(std::move(seg));
    }
    if (v2 && !r.U8(&runs)) {
      return Bad(absl::StrCat("slice ", i, " run count truncated"));
    }
    if (segments + runs == 0) {
      return Bad(absl::StrCat("slice ", i, " holds no segment and no run"));
    }
    for (int j = 0; j < runs; ++j) {
      RunPart part;
      uint8_t open = 0;
      uint32_t len = 0;
      absl::string_view bytes;
      if (!r.U32(&part.capacity) || !r.U8(&open) || !r.U32(&len) ||
          !r.Bytes(len, &bytes)) {
        return Bad(absl::StrCat("slice ", i, " run ", j, " truncated"));
      }
      if (open > 1) {
        return Bad(absl::StrCat("slice ", i, " run ", j, " open flag ", open));
      }
      part.open = open == 1;
      absl::StatusOr<FingerprintRun> run =
          FingerprintRun::Parse(std::string_view(bytes.data(), bytes.size()));
      if (!run.ok()) {
        return Bad(absl::StrCat("slice ", i, " run ", j, ": ",
                                run.status().message()));
      }
      part.run = *std::move(run);
      slice.runs.push_back(std::move(part));
    }
    out.parts.slices.push_back(std::move(slice));
  }
  if (r.remaining() != 0) {
    return Bad(absl::StrCat(r.remaining(), " bytes after the last slice"));
  }
  return out;
}

}  // namespace exposure_filter
