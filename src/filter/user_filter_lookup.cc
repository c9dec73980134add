// UserFilter's reads: which live slices claim an item (RemoveExposed,
// MayContain, ClaimingSlices), and aging: dropping the slices that aged out.
#include <algorithm>
#include <vector>

#include "src/filter/claim_index.h"
#include "src/filter/user_filter.h"
#include "src/filter/user_filter_internal.h"

namespace exposure_filter {

using user_filter_internal::LegacyFpRate;

void UserFilter::RemoveExposed(const FilterPolicy& policy, int64_t now_ms,
                               absl::Span<const uint64_t> hashes,
                               uint8_t* keep) const {
  if (h_ == nullptr || hashes.empty()) return;
  const Tables t = Decode();
  if (t.legacy != nullptr) {
    t.legacy->slices.RemoveExposed(policy, now_ms, hashes, keep);
  }
  if (t.runs.empty()) return;
  // The live runs' codes against the candidates: a hash join built on the
  // codes (ClaimIndex), or the other direction where it refuses.
  thread_local std::vector<FingerprintRunView> live;
  live.clear();
  size_t r = 0;
  for (const SliceMeta& s : t.slices) {
    const bool live_slice = policy.SliceLive(s.index, now_ms);
    for (int j = 0; j < s.num_runs; ++j, ++r) {
      if (live_slice) live.push_back(View(t.runs[r]));
    }
  }
  RemoveClaimedByRuns(live, hashes, keep);
}

bool UserFilter::MayContain(const FilterPolicy& policy, int64_t now_ms,
                            uint64_t item_hash) const {
  std::vector<int64_t> claiming;
  ClaimingSlices(policy, now_ms, item_hash, &claiming);
  return !claiming.empty();
}

void UserFilter::ClaimingSlices(const FilterPolicy& policy, int64_t now_ms,
                                uint64_t item_hash,
                                std::vector<int64_t>* slice_indices) const {
  if (h_ == nullptr) return;
  const Tables t = Decode();
  std::vector<int64_t> found;
  if (t.legacy != nullptr) {
    t.legacy->slices.ClaimingSlices(policy, now_ms, item_hash, &found);
  }
  size_t r = 0;
  for (const SliceMeta& s : t.slices) {
    bool claims = false;
    for (int j = 0; j < s.num_runs; ++j, ++r) {
      if (!claims && policy.SliceLive(s.index, now_ms)) {
        claims = View(t.runs[r]).Contains(item_hash);
      }
    }
    if (claims) found.push_back(s.index);
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  slice_indices->insert(slice_indices->end(), found.begin(), found.end());
}

int UserFilter::DropExpired(const FilterPolicy& policy, int64_t now_ms) {
  if (h_ == nullptr) return 0;
  // The store calls this before every write, which mostly finds nothing to
  // drop: the slices are in ascending index order (Rebuild keeps Plan's
  // order; FromParts requires it) and SliceLive is monotone in the index,
  // so a live oldest slice means a live filter, read from the first slice's
  // head instead of decoding every run's entry (the model's expm1 each).
  if (const TablesHead head = ReadHead(); head.legacy == nullptr) {
    const unsigned char* p = head.first_slice;
    if (head.slices == 0 ||
        policy.SliceLive(ReadSliceHead(p, -1, 0).index, now_ms)) {
      return 0;
    }
  }
  Tables t = Decode();
  std::vector<int64_t> dropped;
  for (const SliceMeta& s : t.slices) {
    if (!policy.SliceLive(s.index, now_ms)) dropped.push_back(s.index);
  }
  Legacy* legacy = t.legacy;
  bool legacy_changed = false;
  if (legacy != nullptr) {
    for (const BloomSlices::Slice& s : legacy->slices.slices()) {
      if (!policy.SliceLive(s.index, now_ms)) dropped.push_back(s.index);
    }
    if (legacy->slices.DropExpired(policy, now_ms) > 0) {
      legacy_changed = true;
      if (legacy->slices.slices().empty()) {
        delete legacy;
        legacy = nullptr;
      } else {
        legacy->fp = LegacyFpRate(legacy->slices);
      }
    }
  }
  std::sort(dropped.begin(), dropped.end());
  dropped.erase(std::unique(dropped.begin(), dropped.end()), dropped.end());
  if (dropped.empty() && !legacy_changed) return 0;
  std::vector<SlicePlan> plan = Plan(t);
  plan.erase(std::remove_if(plan.begin(), plan.end(),
                            [&](const SlicePlan& s) {
                              return !policy.SliceLive(s.meta.index, now_ms);
                            }),
             plan.end());
  Rebuild(plan, legacy, key());
  return static_cast<int>(dropped.size());
}

bool UserFilter::HasLiveSlices(const FilterPolicy& policy,
                               int64_t now_ms) const {
  if (h_ == nullptr) return false;
  const Tables t = Decode();
  if (!t.slices.empty() && policy.SliceLive(t.slices.back().index, now_ms)) {
    return true;
  }
  return t.legacy != nullptr && t.legacy->slices.HasLiveSlices(policy, now_ms);
}

}  // namespace exposure_filter
