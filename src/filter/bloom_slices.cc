#include "src/filter/bloom_slices.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include "absl/container/inlined_vector.h"
#include "src/filter/bloom_math.h"
#include "src/filter/probe_kernel.h"

namespace exposure_filter {
namespace {

constexpr uint32_t kMaxCount32 = std::numeric_limits<uint32_t>::max();
// Header::key_len of a key of >= 65535 bytes, whose u32 length then
// precedes its bytes (user ids are limited to --max_id_bytes, 256 by
// default, but the limit is a flag).
constexpr uint16_t kLongKey = 0xffff;

size_t KeyBytes(size_t key_len) {
  return key_len >= kLongKey ? key_len + sizeof(uint32_t) : key_len;
}

uint32_t Saturate32(uint64_t v) {
  return static_cast<uint32_t>(std::min<uint64_t>(v, kMaxCount32));
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

// Allocations of two or more blocks are 64-byte aligned so each probe
// touches one cache line. A one-block filter (every user below ~30 items)
// is not: the alignment would cost more than its whole metadata, and its
// block and tables span two lines either way.
bool Aligned(uint32_t total_blocks) { return total_blocks >= 2; }

}  // namespace

double BloomSlices::Segment::EstimatedFpRate() const {
  return BlockedFpRate(static_cast<double>(count()) / num_blocks(), k());
}

BloomSlices::Segment BloomSlices::SegmentList::operator[](size_t i) const {
  const uint64_t* w = words_;
  for (size_t j = 0; j < i; ++j) w += size_t{meta_[j].num_blocks} * kBlockWords;
  return Segment(w, meta_ + i);
}

size_t BloomSlices::SliceList::Iterator::SegmentsHere() const {
  size_t n = 1;
  while (seg_ + n != seg_end_ && seg_[n].level != 0) ++n;
  return n;
}

BloomSlices::Slice BloomSlices::SliceList::Iterator::operator*() const {
  return Slice{slice_->index, slice_->min_event_ms, slice_->max_event_ms,
               SegmentList(words_, seg_, SegmentsHere())};
}

BloomSlices::SliceList::Iterator&
BloomSlices::SliceList::Iterator::operator++() {
  const size_t n = SegmentsHere();
  for (size_t j = 0; j < n; ++j) {
    words_ += size_t{seg_[j].num_blocks} * kBlockWords;
  }
  seg_ += n;
  ++slice_;
  return *this;
}

BloomSlices::SliceList::Iterator BloomSlices::SliceList::begin() const {
  if (h_ == nullptr) return Iterator(nullptr, nullptr, nullptr, nullptr);
  auto* slices = reinterpret_cast<const SliceMeta*>(h_ + 1);
  auto* segs = reinterpret_cast<const SegmentMeta*>(slices + h_->num_slices);
  auto* words =
      reinterpret_cast<const uint64_t*>(reinterpret_cast<const char*>(h_) -
                                        size_t{h_->total_blocks} * kBlockBytes);
  return Iterator(slices, segs, segs + h_->num_segments, words);
}

BloomSlices::SliceList::Iterator BloomSlices::SliceList::end() const {
  if (h_ == nullptr) return Iterator(nullptr, nullptr, nullptr, nullptr);
  auto* slices = reinterpret_cast<const SliceMeta*>(h_ + 1);
  return Iterator(slices + h_->num_slices, nullptr, nullptr, nullptr);
}

BloomSlices::Slice BloomSlices::SliceList::operator[](size_t i) const {
  Iterator it = begin();
  for (size_t j = 0; j < i; ++j) ++it;
  return *it;
}

// --- Allocation ------------------------------------------------------------

size_t BloomSlices::AllocationBytes(uint32_t total_blocks, int slices,
                                    int segments, size_t key_len) {
  return size_t{total_blocks} * kBlockBytes + sizeof(Header) +
         slices * sizeof(SliceMeta) + segments * sizeof(SegmentMeta) +
         KeyBytes(key_len);
}

void BloomSlices::Free(Header* h) {
  if (h == nullptr) return;
  const uint32_t total = h->total_blocks;
  char* base = reinterpret_cast<char*>(h) - size_t{total} * kBlockBytes;
  h->~Header();
  if (Aligned(total)) {
    ::operator delete (base, std::align_val_t{kBlockBytes});
  } else {
    ::operator delete(base);
  }
}

BloomSlices::BloomSlices(absl::string_view key) { Rebuild({}, key); }

BloomSlices::~BloomSlices() { Free(h_); }

BloomSlices& BloomSlices::operator=(BloomSlices&& o) noexcept {
  if (this != &o) {
    Free(h_);
    h_ = o.h_;
    o.h_ = nullptr;
  }
  return *this;
}

absl::string_view BloomSlices::key() const {
  if (h_ == nullptr) return {};
  const char* p =
      reinterpret_cast<const char*>(segment_table() + h_->num_segments);
  if (h_->key_len != kLongKey) return absl::string_view(p, h_->key_len);
  uint32_t len;
  std::memcpy(&len, p, sizeof(len));
  return absl::string_view(p + sizeof(len), len);
}

void BloomSlices::SetKey(absl::string_view key) { Rebuild(Plan(), key); }

std::vector<BloomSlices::SlicePlan> BloomSlices::Plan() const {
  std::vector<SlicePlan> plan;
  if (h_ == nullptr) return plan;
  plan.reserve(h_->num_slices);
  const SliceMeta* slices = slice_table();
  const SegmentMeta* segs = segment_table();
  const uint64_t* words = blocks();
  int s = -1;
  for (int g = 0; g < h_->num_segments; ++g) {
    if (segs[g].level == 0) {
      ++s;
      plan.push_back(SlicePlan{slices[s], {}});
    }
    plan.back().segments.push_back(SegmentPlan{segs[g], words});
    words += size_t{segs[g].num_blocks} * kBlockWords;
  }
  return plan;
}

void BloomSlices::Rebuild(const std::vector<SlicePlan>& plan,
                          absl::string_view key) {
  uint64_t total = 0;
  int segments = 0;
  for (const SlicePlan& s : plan) {
    for (const SegmentPlan& g : s.segments) total += g.meta.num_blocks;
    segments += static_cast<int>(s.segments.size());
  }
  const int slices = static_cast<int>(plan.size());
  if (slices == 0 && key.empty()) {
    Free(h_);
    h_ = nullptr;
    return;
  }
  const size_t bytes = AllocationBytes(static_cast<uint32_t>(total), slices,
                                       segments, key.size());
  const uint32_t total32 = static_cast<uint32_t>(total);
  char* base = static_cast<char*>(
      Aligned(total32) ? ::operator new (bytes, std::align_val_t{kBlockBytes})
                       : ::operator new(bytes));
  auto* h = reinterpret_cast<Header*>(base + size_t{total32} * kBlockBytes);
  new (h) Header{
      {last_active_ms()},
      total32,
      static_cast<uint8_t>(slices),
      static_cast<uint8_t>(segments),
      key.size() >= kLongKey ? kLongKey : static_cast<uint16_t>(key.size())};
  auto* words = reinterpret_cast<uint64_t*>(base);
  auto* slice_out = reinterpret_cast<SliceMeta*>(h + 1);
  auto* seg_out = reinterpret_cast<SegmentMeta*>(slice_out + slices);
  for (const SlicePlan& s : plan) {
    *slice_out++ = s.meta;
    for (int j = 0; j < static_cast<int>(s.segments.size()); ++j) {
      const SegmentPlan& g = s.segments[j];
      *seg_out = g.meta;
      seg_out->level = static_cast<uint8_t>(j);
      ++seg_out;
      const size_t n = size_t{g.meta.num_blocks} * kBlockBytes;
      if (g.words != nullptr) {
        std::memcpy(words, g.words, n);
      } else {
        std::memset(words, 0, n);
      }
      words += n / sizeof(uint64_t);
    }
  }
  // The key may live in the old allocation: copy it before freeing that.
  char* key_out = reinterpret_cast<char*>(seg_out);
  if (key.size() >= kLongKey) {
    const uint32_t len = static_cast<uint32_t>(key.size());
    std::memcpy(key_out, &len, sizeof(len));
    key_out += sizeof(len);
  }
  if (!key.empty()) std::memcpy(key_out, key.data(), key.size());
  Free(h_);
  h_ = h;
}

// --- Slices and segments ---------------------------------------------------

void BloomSlices::SliceStart(int slice, int* first_segment,
                             uint64_t** words) const {
  const SegmentMeta* segs = segment_table();
  uint64_t* w = blocks();
  int g = 0, s = -1;
  for (; g < h_->num_segments; ++g) {
    if (segs[g].level == 0 && ++s == slice) break;
    w += size_t{segs[g].num_blocks} * kBlockWords;
  }
  *first_segment = g;
  *words = w;
}

int BloomSlices::SegmentsOf(int first_segment) const {
  const SegmentMeta* segs = segment_table();
  int n = 1;
  while (first_segment + n < h_->num_segments &&
         segs[first_segment + n].level != 0) {
    ++n;
  }
  return n;
}

bool BloomSlices::SliceMayContain(int slice, uint64_t h) const {
  int g;
  uint64_t* w;
  SliceStart(slice, &g, &w);
  const SegmentMeta* segs = segment_table();
  const int n = SegmentsOf(g);
  for (int j = 0; j < n; ++j) {
    if (Segment(w, &segs[g + j]).MayContain(h)) return true;
    w += size_t{segs[g + j].num_blocks} * kBlockWords;
  }
  return false;
}

void BloomSlices::SealSlice(const FilterPolicy& policy, SlicePlan& slice,
                            std::vector<BloomSegment>* owned) {
  const int levels = static_cast<int>(slice.segments.size());
  // Late events may still grow this slice, with segments at levels >= levels.
  const double budget = policy.slice_fp_budget() - policy.GrowthReserve(levels);
  // Working copies: BloomSegment measures and folds bits it owns.
  std::vector<BloomSegment> work;
  work.reserve(levels);
  for (const SegmentPlan& g : slice.segments) {
    work.emplace_back(g.meta.num_blocks, g.meta.k, g.meta.capacity);
    work.back().Assign(g.words, g.meta.count);
  }
  std::vector<double> fp(levels);
  double total = 0;
  for (int j = 0; j < levels; ++j) {
    fp[j] = work[j].MeasuredFpRate();
    total += fp[j];
  }
  // Newest (largest, emptiest) segments first: they free the most bytes.
  for (int j = levels - 1; j >= 0; --j) {
    BloomSegment& seg = work[j];
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
        SegmentMeta& m = slice.segments[j].meta;
        m.num_blocks = seg.num_blocks();
        m.capacity = Saturate32(seg.capacity());
        break;
      }
    }
  }
  for (int j = 0; j < levels; ++j) {
    owned->push_back(std::move(work[j]));
    slice.segments[j].words = owned->back().words();
  }
}

BloomSlices::SegmentMeta BloomSlices::NewSegment(const FilterPolicy& policy,
                                                 int level,
                                                 uint64_t min_capacity) {
  const BlockSizing& sizing = policy.level_sizing(level);
  uint32_t blocks = BlocksForCapacity(min_capacity, sizing);
  if (level > 0) blocks = RoundForFolding(blocks);
  const uint64_t capacity =
      std::max<uint64_t>(1, CapacityOfBlocks(blocks, sizing));
  SegmentMeta m{};
  m.num_blocks = blocks;
  m.count = 0;
  m.capacity = Saturate32(capacity);
  m.k = static_cast<uint8_t>(sizing.k);
  m.level = static_cast<uint8_t>(level);
  return m;
}

int BloomSlices::SliceFor(const FilterPolicy& policy, int64_t index,
                          uint64_t incoming) {
  const int n = num_slices();
  const SliceMeta* table = n == 0 ? nullptr : slice_table();
  int pos = 0;
  while (pos < n && table[pos].index < index) ++pos;
  if (pos < n && table[pos].index == index) return pos;
  // At most max_live_slices slices exist once the aged ones are dropped
  // (the caller drops them first), because the window holds no more slice
  // positions, unless the wall clock stepped back: slices written before
  // the step are then "in the future" and the event's own slice would be
  // one too many (more segments per lookup than the FP budget is split
  // over, and a pulled filter past the format's segment limit). The event
  // then goes into the nearest newer slice, which outlives its own: it is
  // remembered a little longer, never shorter (docs/reliability.md).
  if (n >= policy.max_live_slices() && pos < n) return pos;
  std::vector<SlicePlan> plan = Plan();
  // Predict this slice's volume from the slice before it (the user's recent
  // rate); 12.5% headroom absorbs small variation without a second segment,
  // and a larger burst grows a segment that sealing folds back down.
  uint64_t predicted = std::max(policy.min_capacity(), incoming);
  if (pos > 0) {
    uint64_t prev = 0;
    for (const SegmentPlan& g : plan[pos - 1].segments) prev += g.meta.count;
    predicted = std::max(predicted, prev * 9 / 8);
  }
  // A slice newer than all others seals the previous newest one: its volume
  // is now (nearly) final, so over-sized segments can be folded.
  std::vector<BloomSegment> owned;
  if (pos == n && pos > 0) SealSlice(policy, plan[pos - 1], &owned);
  SlicePlan slice;
  slice.meta.index = index;
  slice.meta.min_event_ms = std::numeric_limits<int64_t>::max();
  slice.meta.max_event_ms = std::numeric_limits<int64_t>::min();
  slice.segments.push_back(
      SegmentPlan{NewSegment(policy, 0, predicted), nullptr});
  plan.insert(plan.begin() + pos, std::move(slice));
  Rebuild(plan, key());
  return pos;
}

uint64_t BloomSlices::Record(const FilterPolicy& policy,
                             absl::Span<const uint64_t> hashes,
                             int64_t event_ms) {
  if (hashes.empty()) return 0;
  const int pos =
      SliceFor(policy, policy.SliceIndexOf(event_ms), hashes.size());
  SliceMeta& sm = slice_table()[pos];
  sm.min_event_ms = std::min(sm.min_event_ms, event_ms);
  sm.max_event_ms = std::max(sm.max_event_ms, event_ms);
  // The slice's segments as views, refreshed when a growth step rebuilds
  // the allocation.
  int first;
  uint64_t* words;
  SliceStart(pos, &first, &words);
  int levels = SegmentsOf(first);
  SegmentMeta* segs = segment_table() + first;
  uint64_t* active_words = words;
  for (int j = 0; j + 1 < levels; ++j) {
    active_words += size_t{segs[j].num_blocks} * kBlockWords;
  }
  auto slice_claims = [&](uint64_t h) {
    const uint64_t* w = words;
    for (int j = 0; j < levels; ++j) {
      if (Segment(w, &segs[j]).MayContain(h)) return true;
      w += size_t{segs[j].num_blocks} * kBlockWords;
    }
    return false;
  };
  // A batch's items fall in unrelated blocks, each a likely cache miss on a
  // server holding many users: issue them all at once so they overlap
  // instead of being paid one after the other by the loop below. (Typical
  // writes are tens of items per user; a huge batch only gets its head
  // prefetched, more would evict itself.)
  const size_t prefetch = std::min<size_t>(hashes.size(), 64);
  {
    const uint64_t* w = words;
    for (int j = 0; j < levels; ++j) {
      for (size_t i = 0; i < prefetch; ++i) {
        __builtin_prefetch(w +
                           size_t{BlockIndex(hashes[i], segs[j].num_blocks)} *
                               kBlockWords);
      }
      w += size_t{segs[j].num_blocks} * kBlockWords;
    }
  }
  uint64_t added = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint64_t h = hashes[i];
    if (slice_claims(h)) continue;
    SegmentMeta* active = &segs[levels - 1];
    if (active->count >= active->capacity &&
        levels < FilterPolicy::kMaxSegmentsPerSlice) {
      // Room for 4x the slice so far, and for the rest of this batch.
      uint64_t slice_count = 0;
      for (int j = 0; j < levels; ++j) slice_count += segs[j].count;
      const uint64_t want = std::max(
          {policy.min_capacity(), slice_count * FilterPolicy::kGrowthFactor,
           static_cast<uint64_t>(hashes.size() - i)});
      std::vector<SlicePlan> plan = Plan();
      plan[pos].segments.push_back(
          SegmentPlan{NewSegment(policy, levels, want), nullptr});
      Rebuild(plan, key());
      SliceStart(pos, &first, &words);
      levels = SegmentsOf(first);
      segs = segment_table() + first;
      active_words = words;
      for (int j = 0; j + 1 < levels; ++j) {
        active_words += size_t{segs[j].num_blocks} * kBlockWords;
      }
      active = &segs[levels - 1];
    }
    BlockAdd(
        active_words + size_t{BlockIndex(h, active->num_blocks)} * kBlockWords,
        h, active->k);
    if (active->count < kMaxCount32) ++active->count;
    ++added;
  }
  return added;
}

bool BloomSlices::AppendSlice(SliceData slice) {
  constexpr int kMaxTableEntries = std::numeric_limits<uint8_t>::max();
  if (slice.segments.empty() ||
      slice.segments.size() > FilterPolicy::kMaxSegmentsPerSlice ||
      num_slices() + 1 > kMaxTableEntries ||
      (h_ == nullptr ? 0 : h_->num_segments) + slice.segments.size() >
          kMaxTableEntries) {
    return false;
  }
  uint64_t blocks = h_ == nullptr ? 0 : h_->total_blocks;
  for (const BloomSegment& seg : slice.segments) blocks += seg.num_blocks();
  if (blocks > std::numeric_limits<uint32_t>::max()) return false;
  std::vector<SlicePlan> plan = Plan();
  SlicePlan s;
  s.meta = SliceMeta{slice.index, slice.min_event_ms, slice.max_event_ms};
  for (size_t j = 0; j < slice.segments.size(); ++j) {
    const BloomSegment& seg = slice.segments[j];
    SegmentMeta m{};
    m.num_blocks = seg.num_blocks();
    m.count = Saturate32(seg.count());
    m.capacity = Saturate32(seg.capacity());
    m.k = static_cast<uint8_t>(seg.k());
    m.level = static_cast<uint8_t>(j);
    s.segments.push_back(SegmentPlan{m, seg.words()});
  }
  plan.push_back(std::move(s));
  Rebuild(plan, key());
  return true;
}

FilterParts BloomSlices::ToParts() const {
  FilterParts parts;
  for (const Slice& s : slices()) {
    SlicePart sp;
    sp.index = s.index;
    sp.min_event_ms = s.min_event_ms;
    sp.max_event_ms = s.max_event_ms;
    for (const Segment& seg : s.segments) {
      BloomSegment b(seg.num_blocks(), seg.k(), seg.capacity());
      b.Assign(seg.words(), seg.count());
      sp.bloom_segments.push_back(std::move(b));
    }
    parts.slices.push_back(std::move(sp));
  }
  return parts;
}

// --- Reads -----------------------------------------------------------------

void BloomSlices::RemoveExposed(const FilterPolicy& policy, int64_t now_ms,
                                absl::Span<const uint64_t> hashes,
                                uint8_t* keep) const {
  // All live segments in one candidate-major walk (probe_kernel.h).
  absl::InlinedVector<SegmentRef, 16> segs;
  for (const Slice& slice : slices()) {
    if (!policy.SliceLive(slice.index, now_ms)) continue;
    for (const Segment& seg : slice.segments) {
      segs.push_back(SegmentRef{seg.words(), seg.num_blocks(), seg.k()});
    }
  }
  RemoveContainedAny(segs.data(), segs.size(), hashes.data(), hashes.size(),
                     keep);
}

namespace {

bool AnySegmentClaims(const BloomSlices::Slice& s, uint64_t h) {
  for (const BloomSlices::Segment& seg : s.segments) {
    if (seg.MayContain(h)) return true;
  }
  return false;
}

}  // namespace

bool BloomSlices::MayContain(const FilterPolicy& policy, int64_t now_ms,
                             uint64_t item_hash) const {
  for (const Slice& slice : slices()) {
    if (policy.SliceLive(slice.index, now_ms) &&
        AnySegmentClaims(slice, item_hash)) {
      return true;
    }
  }
  return false;
}

void BloomSlices::ClaimingSlices(const FilterPolicy& policy, int64_t now_ms,
                                 uint64_t item_hash,
                                 std::vector<int64_t>* slice_indices) const {
  for (const Slice& slice : slices()) {
    if (policy.SliceLive(slice.index, now_ms) &&
        AnySegmentClaims(slice, item_hash)) {
      slice_indices->push_back(slice.index);
    }
  }
}

int BloomSlices::DropExpired(const FilterPolicy& policy, int64_t now_ms) {
  // Slices are in ascending time order, so the dead ones are a prefix.
  const int n = num_slices();
  int dropped = 0;
  while (dropped < n &&
         !policy.SliceLive(slice_table()[dropped].index, now_ms)) {
    ++dropped;
  }
  if (dropped == 0) return 0;
  std::vector<SlicePlan> plan = Plan();
  plan.erase(plan.begin(), plan.begin() + dropped);
  Rebuild(plan, key());
  return dropped;
}

bool BloomSlices::HasLiveSlices(const FilterPolicy& policy,
                                int64_t now_ms) const {
  const int n = num_slices();
  return n > 0 && policy.SliceLive(slice_table()[n - 1].index, now_ms);
}

size_t BloomSlices::MemoryBytes() const {
  if (h_ == nullptr) return 0;
  return AllocationBytes(h_->total_blocks, h_->num_slices, h_->num_segments,
                         key().size());
}

UserFilterStats BloomSlices::Stats(const FilterPolicy& policy,
                                   int64_t now_ms) const {
  UserFilterStats st;
  st.bytes = MemoryBytes();
  double p_clean = 1.0;  // P(a fresh item passes every live segment)
  for (const Slice& s : slices()) {
    if (!policy.SliceLive(s.index, now_ms)) continue;
    SliceStats ss;
    ss.start_ms = policy.SliceStartMs(s.index);
    ss.end_ms = policy.SliceEndMs(s.index);
    double slice_clean = 1.0;
    for (const Segment& seg : s.segments) {
      ss.items += seg.count();
      ss.capacity += seg.capacity();
      ss.bytes += seg.bit_bytes();
      slice_clean *= 1.0 - seg.EstimatedFpRate();
    }
    ss.segments = static_cast<uint32_t>(s.segments.size());
    ss.bloom_segments = ss.segments;
    ss.estimated_fp_rate = 1.0 - slice_clean;
    p_clean *= slice_clean;
    if (st.slices == 0) {
      st.oldest_exposure_ms = s.min_event_ms;
      st.expires_at_ms = ss.end_ms + policy.retention_ms();
    }
    st.newest_exposure_ms = std::max(st.newest_exposure_ms, s.max_event_ms);
    st.items += ss.items;
    st.segments += ss.segments;
    st.bloom_segments += ss.bloom_segments;
    ++st.slices;
    st.slice_stats.push_back(ss);
  }
  st.estimated_fp_rate = 1.0 - p_clean;
  return st;
}

}  // namespace exposure_filter
