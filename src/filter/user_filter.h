// UserFilter: one user's exposure history on one surface, as a short ring of
// time slices, each a chain of blocked Bloom segments (filter_policy.h has
// the time and FP-budget math).
//
// Sizing follows the user's volume: a new slice starts with room for 1.25x
// what the previous slice held or for the batch that opens it, whichever is
// larger (one block, ~30 items, for a new user's first few items); when
// its newest segment fills, the slice grows a segment holding 4x the slice's
// count at half the previous FP budget. History is never rebuilt or lost by
// growth; it is only dropped when its slice ages out.
//
// Thread-compatibility: const methods may run concurrently; mutation needs
// exclusive access (the store's shard lock provides it).
#ifndef EXPOSURE_FILTER_SRC_FILTER_USER_FILTER_H_
#define EXPOSURE_FILTER_SRC_FILTER_USER_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "src/filter/bloom_segment.h"
#include "src/filter/filter_policy.h"

namespace exposure_filter {

struct SliceStats {
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  uint64_t items = 0;
  uint64_t capacity = 0;
  uint64_t bytes = 0;
  uint32_t segments = 0;
  double estimated_fp_rate = 0;
};

struct UserFilterStats {
  uint64_t items = 0;
  uint64_t bytes = 0;
  uint32_t slices = 0;
  uint32_t segments = 0;
  double estimated_fp_rate = 0;
  int64_t oldest_exposure_ms = 0;
  int64_t newest_exposure_ms = 0;
  int64_t expires_at_ms = 0;
  std::vector<SliceStats> slice_stats;
};

class UserFilter {
 public:
  struct Slice {
    int64_t index = 0;  // covers [index*span, (index+1)*span)
    int64_t min_event_ms = 0;
    int64_t max_event_ms = 0;
    absl::InlinedVector<BloomSegment, 1> segments;
  };

  UserFilter() = default;
  UserFilter(UserFilter&&) noexcept = default;
  UserFilter& operator=(UserFilter&&) noexcept = default;

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

  // Drops slices that aged out; returns how many.
  int DropExpired(const FilterPolicy& policy, int64_t now_ms);
  bool HasLiveSlices(const FilterPolicy& policy, int64_t now_ms) const;

  // Heap bytes held for this user, all-in (segments, slice array, blocks),
  // excluding the hash-map slot the store accounts itself.
  size_t MemoryBytes() const;
  UserFilterStats Stats(const FilterPolicy& policy, int64_t now_ms) const;

  // Slices in ascending time order; may include aged-out slices not yet
  // dropped (check policy.SliceLive).
  const std::vector<Slice>& slices() const { return slices_; }
  // For decoding a snapshot: appends a slice (ascending index order).
  void AppendSlice(Slice slice) { slices_.push_back(std::move(slice)); }

 private:
  // The slice `index`, created with room for at least `incoming` items.
  Slice& SliceFor(const FilterPolicy& policy, int64_t index, uint64_t incoming);
  static BloomSegment NewSegment(const FilterPolicy& policy, int level,
                                 uint64_t min_capacity);
  // Folds the slice's over-sized segments while its measured FP stays within
  // budget (filter_policy.h, "Sealing").
  static void SealSlice(const FilterPolicy& policy, Slice& slice);

  std::vector<Slice> slices_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_USER_FILTER_H_
