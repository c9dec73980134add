#include "src/filter/user_filter.h"

#include <algorithm>
#include <limits>

#include "src/filter/bloom_math.h"
#include "src/filter/probe_kernel.h"

namespace exposure_filter {
namespace {

uint64_t SliceCount(const UserFilter::Slice& s) {
  uint64_t n = 0;
  for (const BloomSegment& seg : s.segments) n += seg.count();
  return n;
}

bool SliceMayContain(const UserFilter::Slice& s, uint64_t h) {
  for (const BloomSegment& seg : s.segments) {
    if (seg.MayContain(h)) return true;
  }
  return false;
}

// Growth segments are sized for 4x the slice and are mostly empty when the
// slice is sealed; rounding their block count up to m * 2^e with m in [8, 16)
// (<= 12.5% more bits) gives them power-of-two fold factors (SealSlice).
uint32_t RoundForFolding(uint32_t blocks) {
  if (blocks < 16) return blocks;
  const int e = 31 - __builtin_clz(blocks) - 3;
  const uint32_t unit = 1u << e;
  return (blocks + unit - 1) / unit * unit;
}

// Fold factors of a segment of `blocks` blocks, largest first.
std::vector<uint32_t> FoldFactors(uint32_t blocks) {
  std::vector<uint32_t> f;
  for (uint32_t d = blocks; d >= 2; --d) {
    if (blocks % d == 0) f.push_back(d);
  }
  return f;
}

}  // namespace

void UserFilter::SealSlice(const FilterPolicy& policy, Slice& slice) {
  const int levels = static_cast<int>(slice.segments.size());
  // Late events may still grow this slice, with segments at levels >= levels.
  const double budget = policy.slice_fp_budget() - policy.GrowthReserve(levels);
  std::vector<double> fp(levels);
  double total = 0;
  for (int j = 0; j < levels; ++j) {
    fp[j] = slice.segments[j].MeasuredFpRate();
    total += fp[j];
  }
  // Newest (largest, emptiest) segments first: they free the most bytes.
  for (int j = levels - 1; j >= 0; --j) {
    BloomSegment& seg = slice.segments[j];
    const std::vector<uint32_t> factors = FoldFactors(seg.num_blocks());
    // Folding more never lowers the FP rate: if the smallest factor does not
    // fit the budget, none does (and the seal stays O(blocks)).
    if (factors.empty() ||
        total - fp[j] + seg.FoldedFpRate(factors.back()) > budget) {
      continue;
    }
    for (uint32_t f : factors) {
      const double folded = seg.FoldedFpRate(f);
      if (total - fp[j] + folded <= budget) {
        seg.Fold(f);
        total += folded - fp[j];
        fp[j] = folded;
        break;
      }
    }
  }
}

BloomSegment UserFilter::NewSegment(const FilterPolicy& policy, int level,
                                    uint64_t min_capacity) {
  const BlockSizing& sizing = policy.level_sizing(level);
  uint32_t blocks = BlocksForCapacity(min_capacity, sizing);
  if (level > 0) blocks = RoundForFolding(blocks);
  const uint64_t capacity =
      std::max<uint64_t>(1, CapacityOfBlocks(blocks, sizing));
  return BloomSegment(blocks, sizing.k, capacity);
}

UserFilter::Slice& UserFilter::SliceFor(const FilterPolicy& policy,
                                        int64_t index, uint64_t incoming) {
  auto it =
      std::lower_bound(slices_.begin(), slices_.end(), index,
                       [](const Slice& s, int64_t i) { return s.index < i; });
  if (it != slices_.end() && it->index == index) return *it;
  // Predict this slice's volume from the slice before it (the user's recent
  // rate); 12.5% headroom absorbs small variation without a second segment,
  // and a larger burst grows a segment that sealing folds back down.
  uint64_t predicted = std::max(policy.min_capacity(), incoming);
  if (it != slices_.begin()) {
    predicted = std::max(predicted, SliceCount(*std::prev(it)) * 9 / 8);
  }
  // A slice newer than all others seals the previous newest one: its volume
  // is now (nearly) final, so over-sized segments can be folded.
  if (it == slices_.end() && it != slices_.begin()) {
    SealSlice(policy, *std::prev(it));
  }
  Slice slice;
  slice.index = index;
  slice.min_event_ms = std::numeric_limits<int64_t>::max();
  slice.max_event_ms = std::numeric_limits<int64_t>::min();
  slice.segments.push_back(NewSegment(policy, 0, predicted));
  return *slices_.insert(it, std::move(slice));
}

uint64_t UserFilter::Record(const FilterPolicy& policy,
                            absl::Span<const uint64_t> hashes,
                            int64_t event_ms) {
  if (hashes.empty()) return 0;
  Slice& slice = SliceFor(policy, policy.SliceIndexOf(event_ms), hashes.size());
  slice.min_event_ms = std::min(slice.min_event_ms, event_ms);
  slice.max_event_ms = std::max(slice.max_event_ms, event_ms);
  // A batch's items fall in unrelated blocks, each a likely cache miss on a
  // server holding many users: issue them all at once so they overlap
  // instead of being paid one after the other by the loop below. (Typical
  // writes are tens of items per user; a huge batch only gets its head
  // prefetched, more would evict itself.)
  const size_t prefetch = std::min<size_t>(hashes.size(), 64);
  for (const BloomSegment& seg : slice.segments) {
    for (size_t i = 0; i < prefetch; ++i) {
      __builtin_prefetch(seg.words() +
                         size_t{BlockIndex(hashes[i], seg.num_blocks())} *
                             kBlockWords);
    }
  }
  uint64_t added = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint64_t h = hashes[i];
    if (SliceMayContain(slice, h)) continue;
    BloomSegment* active = &slice.segments.back();
    const int level = static_cast<int>(slice.segments.size());
    if (active->full() && level < FilterPolicy::kMaxSegmentsPerSlice) {
      // Room for 4x the slice so far, and for the rest of this batch.
      const uint64_t want =
          std::max({policy.min_capacity(),
                    SliceCount(slice) * FilterPolicy::kGrowthFactor,
                    static_cast<uint64_t>(hashes.size() - i)});
      slice.segments.push_back(NewSegment(policy, level, want));
      active = &slice.segments.back();
    }
    active->Add(h);
    ++added;
  }
  return added;
}

void UserFilter::RemoveExposed(const FilterPolicy& policy, int64_t now_ms,
                               absl::Span<const uint64_t> hashes,
                               uint8_t* keep) const {
  // All live segments in one candidate-major walk (probe_kernel.h).
  absl::InlinedVector<SegmentRef, 16> segs;
  for (const Slice& slice : slices_) {
    if (!policy.SliceLive(slice.index, now_ms)) continue;
    for (const BloomSegment& seg : slice.segments) {
      segs.push_back(SegmentRef{seg.words(), seg.num_blocks(), seg.k()});
    }
  }
  RemoveContainedAny(segs.data(), segs.size(), hashes.data(), hashes.size(),
                     keep);
}

bool UserFilter::MayContain(const FilterPolicy& policy, int64_t now_ms,
                            uint64_t item_hash) const {
  for (const Slice& slice : slices_) {
    if (policy.SliceLive(slice.index, now_ms) &&
        SliceMayContain(slice, item_hash)) {
      return true;
    }
  }
  return false;
}

void UserFilter::ClaimingSlices(const FilterPolicy& policy, int64_t now_ms,
                                uint64_t item_hash,
                                std::vector<int64_t>* slice_indices) const {
  for (const Slice& slice : slices_) {
    if (policy.SliceLive(slice.index, now_ms) &&
        SliceMayContain(slice, item_hash)) {
      slice_indices->push_back(slice.index);
    }
  }
}

int UserFilter::DropExpired(const FilterPolicy& policy, int64_t now_ms) {
  // Slices are in ascending time order, so the dead ones are a prefix.
  auto first_live = std::find_if(
      slices_.begin(), slices_.end(),
      [&](const Slice& s) { return policy.SliceLive(s.index, now_ms); });
  const int dropped = static_cast<int>(first_live - slices_.begin());
  slices_.erase(slices_.begin(), first_live);
  if (slices_.empty()) slices_.shrink_to_fit();
  return dropped;
}

bool UserFilter::HasLiveSlices(const FilterPolicy& policy,
                               int64_t now_ms) const {
  return !slices_.empty() && policy.SliceLive(slices_.back().index, now_ms);
}

size_t UserFilter::MemoryBytes() const {
  size_t bytes = slices_.capacity() * sizeof(Slice);
  for (const Slice& s : slices_) {
    if (s.segments.size() > 1)
      bytes += s.segments.capacity() * sizeof(BloomSegment);
    for (const BloomSegment& seg : s.segments) bytes += seg.bit_bytes();
  }
  return bytes;
}

UserFilterStats UserFilter::Stats(const FilterPolicy& policy,
                                  int64_t now_ms) const {
  UserFilterStats st;
  st.bytes = MemoryBytes();
  double p_clean = 1.0;  // P(a fresh item passes every live segment)
  for (const Slice& s : slices_) {
    if (!policy.SliceLive(s.index, now_ms)) continue;
    SliceStats ss;
    ss.start_ms = policy.SliceStartMs(s.index);
    ss.end_ms = policy.SliceEndMs(s.index);
    double slice_clean = 1.0;
    for (const BloomSegment& seg : s.segments) {
      ss.items += seg.count();
      ss.capacity += seg.capacity();
      ss.bytes += seg.bit_bytes();
      slice_clean *= 1.0 - seg.EstimatedFpRate();
    }
    ss.segments = static_cast<uint32_t>(s.segments.size());
    ss.estimated_fp_rate = 1.0 - slice_clean;
    p_clean *= slice_clean;
    if (st.slices == 0) {
      st.oldest_exposure_ms = s.min_event_ms;
      st.expires_at_ms = ss.end_ms + policy.retention_ms();
    }
    st.newest_exposure_ms = std::max(st.newest_exposure_ms, s.max_event_ms);
    st.items += ss.items;
    st.segments += ss.segments;
    ++st.slices;
    st.slice_stats.push_back(ss);
  }
  st.estimated_fp_rate = 1.0 - p_clean;
  return st;
}

}  // namespace exposure_filter
