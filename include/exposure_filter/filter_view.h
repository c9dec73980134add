// FilterView: a read-only, bounds-checked view of a filter in the portable
// format (docs/filter-format.md), for recall servers that pull a user's filter
// with GetFilter and test candidates locally.
//
//   absl::StatusOr<FilterView> view = FilterView::Parse(response.filter());
//   if (!view.ok()) ...                      // malformed bytes: an error,
//   never UB bool seen = view->MayContainId(item_id); // same answer as
//   FilterRecalled
//
// The view points into the caller's bytes; they must outlive it. Parse checks
// every length and the checksum before any probe reads a block.
#ifndef EXPOSURE_FILTER_FILTER_VIEW_H_
#define EXPOSURE_FILTER_FILTER_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace exposure_filter {

class FilterView {
 public:
  struct Segment {
    int64_t start_ms = 0;  // slice covers event times [start_ms, end_ms)
    int64_t end_ms = 0;
    uint32_t num_blocks = 0;
    uint32_t item_count = 0;
    int k = 0;
    int level = 0;
    const unsigned char* blocks = nullptr;  // num_blocks * 64 bytes
  };

  static absl::StatusOr<FilterView> Parse(absl::string_view bytes);

  bool MayContainHash(uint64_t item_hash) const;
  bool MayContainId(uint64_t id) const;
  bool MayContainKey(absl::string_view key) const;
  // Batch checks, as FilterRecalled's KEEP_MASK: keep[i] = 0 where item i
  // may have been exposed, else 1. `keep` must hold as many bytes as there
  // are items.
  void KeepMaskIds(absl::Span<const uint64_t> ids, uint8_t* keep) const;
  void KeepMaskKeys(absl::Span<const std::string> keys, uint8_t* keep) const;
  void KeepMaskHashes(absl::Span<const uint64_t> item_hashes,
                      uint8_t* keep) const;

  const std::vector<Segment>& segments() const { return segments_; }
  double fp_rate_target() const { return fp_rate_target_; }
  uint64_t checksum() const { return checksum_; }
  // Estimated P(a fresh item is reported as exposed).
  double EstimatedFpRate() const;

 private:
  std::vector<Segment> segments_;
  double fp_rate_target_ = 0;
  uint64_t checksum_ = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_FILTER_VIEW_H_
