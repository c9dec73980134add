// BloomSlices: filter format 1, kept for LEGACY data only. A data dir written
// by a release before format 2 holds these in its snapshots; such a user
// keeps them (lookups only: UserFilter sends every new write to fingerprint
// runs) until they age out. The class is the previous UserFilter unchanged:
// one user's exposure history on one surface, as a short ring of time
// slices, each a chain of blocked Bloom segments (filter_policy.h has the
// time and FP-budget math).
//
// Sizing follows the user's volume: a new slice starts with room for 1.125x
// what the previous slice held or for the batch that opens it, whichever is
// larger (one block, ~30 items, for a new user's first few items); when
// its newest segment fills, the slice grows a segment holding 4x the slice's
// count at half the previous FP budget. History is never rebuilt or lost by
// growth; it is only dropped when its slice ages out.
//
// Memory layout. Most users are small (a 20-item user needs one 64-byte
// block), so the per-user overhead around the bits decides how many users a
// machine holds. The whole filter is ONE heap allocation and the object is
// one pointer:
//
//   [blocks of every segment, in format order][header][slices][segments][key]
//    ^ 64-byte aligned when there are >= 2 blocks ^ the object points here
//
// The header, slice and segment tables sit after the blocks, so the blocks
// start the allocation (aligned without padding) and the metadata packs
// tightly behind them. The allocation also carries an owner key (the store's
// map key: surface and user id) and a last-active time, so the store's map
// slot can be this single pointer. Adding a slice or a segment, sealing and
// dropping slices rebuild the allocation (rare: once per slice span or
// growth step); recording an item and probing work in place.
//
// Thread-compatibility: const methods may run concurrently; mutation needs
// exclusive access (the store's shard lock provides it). Touch() is the one
// const method that writes (an atomic), so readers under a shared lock may
// call it.
#ifndef EXPOSURE_FILTER_SRC_FILTER_BLOOM_SLICES_H_
#define EXPOSURE_FILTER_SRC_FILTER_BLOOM_SLICES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "exposure_filter/bloom_probe.h"
#include "src/filter/bloom_segment.h"
#include "src/filter/filter_policy.h"
#include "src/filter/filter_parts.h"
#include "src/filter/filter_stats.h"

namespace exposure_filter {

class BloomSlices {
 private:
  // The packed tables (see the layout above). Counts and capacities are 32
  // bits: a segment holds at most 2^26 blocks, and the portable format's
  // item_count saturates at 2^32 - 1 too.
  struct Header {
    std::atomic<int64_t> last_active_ms;
    uint32_t total_blocks;
    uint8_t num_slices;
    uint8_t num_segments;
    uint16_t key_len;
  };
  struct SliceMeta {
    int64_t index;  // covers [index*span, (index+1)*span)
    int64_t min_event_ms;
    int64_t max_event_ms;
  };
  struct SegmentMeta {
    uint32_t num_blocks;
    uint32_t count;     // saturates at 2^32 - 1
    uint32_t capacity;  // count at which the segment reaches its FP budget
    uint8_t k;
    uint8_t level;  // 0 starts a slice; segments of one slice follow it
    uint8_t reserved[2];
  };

 public:
  // Read-only view of one segment inside the filter.
  class Segment {
   public:
    const uint64_t* words() const { return words_; }
    uint32_t num_blocks() const { return meta_->num_blocks; }
    int k() const { return meta_->k; }
    uint64_t count() const { return meta_->count; }
    uint64_t capacity() const { return meta_->capacity; }
    bool full() const { return meta_->count >= meta_->capacity; }
    size_t bit_bytes() const { return size_t{num_blocks()} * kBlockBytes; }
    bool MayContain(uint64_t item_hash) const {
      return BlockMayContain(
          words_ + size_t{BlockIndex(item_hash, num_blocks())} * kBlockWords,
          item_hash, k());
    }
    // Expected FP rate at the current count (bloom_math.h).
    double EstimatedFpRate() const;

   private:
    friend class BloomSlices;
    Segment(const uint64_t* words, const SegmentMeta* meta)
        : words_(words), meta_(meta) {}
    const uint64_t* words_;
    const SegmentMeta* meta_;
  };

  // The segments of one slice, oldest level first.
  class SegmentList {
   public:
    class Iterator {
     public:
      using iterator_category = std::forward_iterator_tag;
      using value_type = Segment;
      using difference_type = std::ptrdiff_t;
      using pointer = void;
      using reference = Segment;
      Segment operator*() const { return Segment(words_, meta_); }
      Iterator& operator++() {
        words_ += size_t{meta_->num_blocks} * kBlockWords;
        ++meta_;
        return *this;
      }
      bool operator==(const Iterator& o) const { return meta_ == o.meta_; }
      bool operator!=(const Iterator& o) const { return meta_ != o.meta_; }

     private:
      friend class SegmentList;
      Iterator(const uint64_t* words, const SegmentMeta* meta)
          : words_(words), meta_(meta) {}
      const uint64_t* words_;
      const SegmentMeta* meta_;
    };
    Iterator begin() const { return Iterator(words_, meta_); }
    Iterator end() const { return Iterator(nullptr, meta_ + size_); }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    Segment operator[](size_t i) const;
    Segment front() const { return (*this)[0]; }
    Segment back() const { return (*this)[size_ - 1]; }

   private:
    friend class BloomSlices;
    SegmentList(const uint64_t* words, const SegmentMeta* meta, size_t size)
        : words_(words), meta_(meta), size_(size) {}
    const uint64_t* words_;
    const SegmentMeta* meta_;
    size_t size_;
  };

  // Read-only view of one slice.
  struct Slice {
    int64_t index;  // covers [index*span, (index+1)*span)
    int64_t min_event_ms;
    int64_t max_event_ms;
    SegmentList segments;
  };

  // The slices, ascending time order.
  class SliceList {
   public:
    class Iterator {
     public:
      using iterator_category = std::forward_iterator_tag;
      using value_type = Slice;
      using difference_type = std::ptrdiff_t;
      using pointer = void;
      using reference = Slice;
      Slice operator*() const;
      Iterator& operator++();
      bool operator==(const Iterator& o) const { return slice_ == o.slice_; }
      bool operator!=(const Iterator& o) const { return slice_ != o.slice_; }

     private:
      friend class SliceList;
      Iterator(const SliceMeta* slice, const SegmentMeta* seg,
               const SegmentMeta* seg_end, const uint64_t* words)
          : slice_(slice), seg_(seg), seg_end_(seg_end), words_(words) {}
      size_t SegmentsHere() const;
      const SliceMeta* slice_;
      const SegmentMeta* seg_;
      const SegmentMeta* seg_end_;
      const uint64_t* words_;
    };
    Iterator begin() const;
    Iterator end() const;
    size_t size() const { return h_ == nullptr ? 0 : h_->num_slices; }
    bool empty() const { return size() == 0; }
    Slice operator[](size_t i) const;
    Slice front() const { return (*this)[0]; }
    Slice back() const { return (*this)[size() - 1]; }

   private:
    friend class BloomSlices;
    explicit SliceList(const Header* h) : h_(h) {}
    const Header* h_;
  };

  // A slice with owned segments, for building a filter from parts (snapshot
  // decoding, golden vectors).
  struct SliceData {
    int64_t index = 0;
    int64_t min_event_ms = 0;
    int64_t max_event_ms = 0;
    std::vector<BloomSegment> segments;
  };

  BloomSlices() = default;
  // An empty filter carrying `key` (the owner's map key, <= 65535 bytes).
  explicit BloomSlices(absl::string_view key);
  ~BloomSlices();
  BloomSlices(BloomSlices&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  BloomSlices& operator=(BloomSlices&& o) noexcept;
  BloomSlices(const BloomSlices&) = delete;
  BloomSlices& operator=(const BloomSlices&) = delete;

  // Records that the items with these hashes were shown at `event_ms` (which
  // the caller has checked is inside the retention window). Returns how many
  // were not already claimed by the slice; re-recording an item is a no-op,
  // which makes at-least-once delivery harmless.
  uint64_t Record(const FilterPolicy& policy, absl::Span<const uint64_t> hashes,
                  int64_t event_ms);

  // Clears keep[i] for every hash the live slices claim. keep[i] == 0 on entry
  // is left alone.
  void RemoveExposed(const FilterPolicy& policy, int64_t now_ms,
                     absl::Span<const uint64_t> hashes, uint8_t* keep) const;
  bool MayContain(const FilterPolicy& policy, int64_t now_ms,
                  uint64_t item_hash) const;
  // For Explain: appends the index of every live slice whose segments claim
  // the item, oldest first. Empty iff MayContain is false.
  void ClaimingSlices(const FilterPolicy& policy, int64_t now_ms,
                      uint64_t item_hash,
                      std::vector<int64_t>* slice_indices) const;

  // Drops slices that aged out; returns how many.
  int DropExpired(const FilterPolicy& policy, int64_t now_ms);
  bool HasLiveSlices(const FilterPolicy& policy, int64_t now_ms) const;

  // Heap bytes held for this user, all-in: blocks, tables and key (the one
  // allocation), excluding the owner's map slot (sizeof(BloomSlices)).
  size_t MemoryBytes() const;
  UserFilterStats Stats(const FilterPolicy& policy, int64_t now_ms) const;

  // Slices in ascending time order; may include aged-out slices not yet
  // dropped (check policy.SliceLive).
  SliceList slices() const { return SliceList(h_); }
  // For decoding a snapshot: appends a slice (ascending index order).
  // False (and nothing appended) if the slice has no segment or more than
  // FilterPolicy::kMaxSegmentsPerSlice, or if the filter would exceed what
  // the packed tables hold (255 slices, 255 segments, 2^32 - 1 blocks; a
  // live filter has at most 9 slices of 8 segments).
  bool AppendSlice(SliceData slice);
  // Every slice (live or not) as legacy parts: bloom_segments filled, runs
  // empty, ascending index (filter_parts.h).
  FilterParts ToParts() const;

  // The owner's key ("" if none was given).
  absl::string_view key() const;
  // Replaces the key (a filter decoded from a snapshot joins the store).
  void SetKey(absl::string_view key);
  // When the owner last read or wrote this filter (its LRU clock); 0 for a
  // filter without allocation. Touch only moves it forward, and a read that
  // finds it current writes nothing, so hot users do not bounce the line.
  int64_t last_active_ms() const {
    return h_ == nullptr ? 0
                         : h_->last_active_ms.load(std::memory_order_relaxed);
  }
  void Touch(int64_t now_ms) const {
    if (h_ != nullptr &&
        h_->last_active_ms.load(std::memory_order_relaxed) < now_ms) {
      h_->last_active_ms.store(now_ms, std::memory_order_relaxed);
    }
  }

 private:
  // A new layout being assembled: segment sources are read while the new
  // allocation is filled (nullptr = zero bits).
  struct SegmentPlan {
    SegmentMeta meta;
    const uint64_t* words;
  };
  struct SlicePlan {
    SliceMeta meta;
    std::vector<SegmentPlan> segments;
  };

  SliceMeta* slice_table() const {
    return reinterpret_cast<SliceMeta*>(h_ + 1);
  }
  SegmentMeta* segment_table() const {
    return reinterpret_cast<SegmentMeta*>(slice_table() + h_->num_slices);
  }
  uint64_t* blocks() const {
    return reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(h_) -
                                       size_t{h_->total_blocks} * kBlockBytes);
  }
  int num_slices() const { return h_ == nullptr ? 0 : h_->num_slices; }
  // First segment (index into the segment table) and first word of slice i.
  void SliceStart(int slice, int* first_segment, uint64_t** words) const;
  int SegmentsOf(int first_segment) const;

  std::vector<SlicePlan> Plan() const;
  // Replaces the allocation with one holding `plan` (and the current key and
  // last-active time); copies the bits from the plan's sources first.
  void Rebuild(const std::vector<SlicePlan>& plan, absl::string_view key);
  static size_t AllocationBytes(uint32_t total_blocks, int slices, int segments,
                                size_t key_len);
  static void Free(Header* h);

  // Position of the slice `index`, created with room for at least
  // `incoming` items.
  int SliceFor(const FilterPolicy& policy, int64_t index, uint64_t incoming);
  bool SliceMayContain(int slice, uint64_t item_hash) const;
  static SegmentMeta NewSegment(const FilterPolicy& policy, int level,
                                uint64_t min_capacity);
  // Folds the slice's over-sized segments while its measured FP stays within
  // budget (filter_policy.h, "Sealing"). `owned` keeps the folded bits alive
  // until the plan is built.
  static void SealSlice(const FilterPolicy& policy, SlicePlan& slice,
                        std::vector<BloomSegment>* owned);

  Header* h_ = nullptr;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_BLOOM_SLICES_H_
