// FilterView: a read-only, bounds-checked view of a filter in the portable
// format (docs/filter-format.md), for recall servers that pull a user's filter
// with GetFilter and test candidates locally.
//
//   absl::StatusOr<FilterView> view = FilterView::Parse(response.filter());
//   if (!view.ok()) ...                       // malformed bytes: an error,
//                                             // never UB
//   bool seen = view->MayContainId(item_id);  // same answer as FilterRecalled
//
// The empty key is not an item: the server rejects it (INVALID_ARGUMENT),
// so MayContainKey and KeepMaskKeys reject it too instead of answering.
//
// Parse reads format 2 (what the server encodes: per-slice fingerprint runs
// and legacy Bloom segments) and format 1 (what the previous release served;
// a client may still hold one in its cache). Any other version is rejected
// with a message naming the versions this decoder reads.
//
// The view points into the caller's bytes, which must outlive it and its
// copies: format 1's Bloom segments, and format 2's fingerprint runs, which
// are validated where they lie by Parse and then checked in place by the
// server's own decoder (src/filter/fingerprint_run.h), never copied, except
// the one run (if any) whose decoder could read past the bytes' end, and
// format 2's legacy Bloom blocks when they are unaligned (copied to aligned
// words). Parse checks every length, every run's codes and the checksum
// before any probe reads a byte.
#ifndef EXPOSURE_FILTER_FILTER_VIEW_H_
#define EXPOSURE_FILTER_FILTER_VIEW_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace exposure_filter {

class ClaimIndex;
class FingerprintRunView;

class FilterView {
 public:
  // One time slice: event times [start_ms, end_ms). Its Bloom segments are
  // segments()[first_segment, first_segment + num_segments), its runs
  // runs()[first_run, first_run + num_runs).
  struct Slice {
    int64_t start_ms = 0;
    int64_t end_ms = 0;
    int first_segment = 0;
    int num_segments = 0;
    int first_run = 0;
    int num_runs = 0;
  };
  // A blocked Bloom segment (format 1, or a legacy slice in format 2).
  struct Segment {
    int64_t start_ms = 0;  // its slice covers event times [start_ms, end_ms)
    int64_t end_ms = 0;
    uint32_t num_blocks = 0;
    uint32_t item_count = 0;  // format 1 only (informational); 0 in format 2
    int k = 0;
    int level = 0;                          // position in its slice, 0 first
    const unsigned char* blocks = nullptr;  // num_blocks * 64 bytes
  };
  // A Golomb-Rice coded fingerprint run (format 2).
  struct Run {
    int64_t start_ms = 0;  // its slice covers event times [start_ms, end_ms)
    int64_t end_ms = 0;
    int precision = 0;      // b
    uint64_t universe = 0;  // U
    int rice_k = 0;
    uint32_t count = 0;  // n distinct fingerprints
    uint32_t payload_bytes = 0;
  };

  static absl::StatusOr<FilterView> Parse(absl::string_view bytes);

  FilterView();
  ~FilterView();
  FilterView(const FilterView&);
  FilterView& operator=(const FilterView&);
  FilterView(FilterView&&) noexcept;
  FilterView& operator=(FilterView&&) noexcept;

  bool MayContainHash(uint64_t item_hash) const;
  bool MayContainId(uint64_t id) const;
  // InvalidArgument for the empty key, as FilterRecalled.
  absl::StatusOr<bool> MayContainKey(absl::string_view key) const;
  // Batch checks, as FilterRecalled's KEEP_MASK: keep[i] = 0 where item i
  // may have been exposed, else 1. `keep` must hold as many bytes as there
  // are items. Runs are checked the server's way: the candidates grouped
  // once by their hash's top bits, then one pass over each run's codes.
  void KeepMaskIds(absl::Span<const uint64_t> ids, uint8_t* keep) const;
  // InvalidArgument naming keys[i] if a key is empty (`keep` untouched), as
  // FilterRecalled rejects the whole request.
  absl::Status KeepMaskKeys(absl::Span<const std::string> keys,
                            uint8_t* keep) const;
  void KeepMaskHashes(absl::Span<const uint64_t> item_hashes,
                      uint8_t* keep) const;

  // For a filter checked many times (a recall server's user over a
  // session): the runs' codes filed once, the build side of the join each
  // KeepMaskHashes otherwise builds and throws away. A check through the
  // index pays only the probe, ~3.6 ns a candidate, where one without it
  // also decodes and files every code, ~14 ns a code plus ~0.75 ns a
  // bucket (src/filter/claim_cost.h). The index costs ~8 bytes a code
  // plus 4 a bucket, 4 to 8 buckets a code (ClaimIndex::BucketBits): ~44
  // KiB at 2,000 codes (ClaimIndex::retained_bytes), ~15x the filter's
  // ~1.4 bytes a code, so it is for the users being checked now, not
  // every user held.
  //
  // FileRuns fills `index` from this view's runs for checks of about
  // `candidates` each; false (the index is unusable) when the view has no
  // runs, when filing would pass the index's bound (ClaimIndex::Build), or
  // when the check without it is estimated cheaper than the probe alone
  // (one small run: its bit set, src/filter/claim_cost.h). The second
  // KeepMaskHashes answers exactly as the first, taking the runs from
  // `index`, which must have been filled by FileRuns from this view or
  // from a copy of it.
  bool FileRuns(ClaimIndex* index, size_t candidates) const;
  void KeepMaskHashes(absl::Span<const uint64_t> item_hashes, uint8_t* keep,
                      const ClaimIndex& runs_index) const;

  // Aging: the same view without the slices whose end_ms <= `ms` (slices
  // are oldest first, so a prefix of them). A server drops a slice once
  // its end is `retention` in the past, so a client that holds a filter
  // ages it with ms = server now - retention (docs/session-stream.md,
  // "Aging on the client"). Points into the same bytes.
  FilterView WithSlicesEndingAfter(int64_t ms) const;

  int format_version() const { return format_version_; }
  const std::vector<Slice>& slices() const { return slices_; }
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<Run>& runs() const { return runs_; }
  double fp_rate_target() const { return fp_rate_target_; }
  // Format 2: the surface's slice span; format 1: end_ms - start_ms of the
  // first slice (0 if there is none).
  int64_t slice_span_ms() const { return slice_span_ms_; }
  uint64_t checksum() const { return checksum_; }
  // Estimated P(a fresh item is reported as exposed): runs contribute
  // n / U each, format-2 Bloom segments their measured rate (mean over
  // blocks of (set bits / 512)^k), format-1 segments the rate expected at
  // their item_count.
  double EstimatedFpRate() const;

 private:
  static absl::StatusOr<FilterView> ParseV1(absl::string_view bytes);
  static absl::StatusOr<FilterView> ParseV2(absl::string_view bytes);
  // keep[i] = 1, then 0 where a Bloom segment may hold item_hashes[i].
  void KeepMaskBySegments(absl::Span<const uint64_t> item_hashes,
                          uint8_t* keep) const;

  int format_version_ = 0;
  std::vector<Slice> slices_;
  std::vector<Segment> segments_;
  std::vector<Run> runs_;
  // The runs' codes, parallel to runs_: views into the caller's bytes, or
  // into copied_runs_.
  std::vector<FingerprintRunView> run_views_;
  // Payloads Parse had to copy (at most one run's: see ParseV2), as
  // zero-padded 64-bit words; shared by copies of the view.
  std::shared_ptr<const std::vector<std::vector<uint64_t>>> copied_runs_;
  // Format 2's legacy Bloom blocks, copied to 8-byte-aligned words when the
  // bytes had them unaligned (segments_ then point here; shared by copies).
  std::shared_ptr<const std::vector<uint64_t>> aligned_blocks_;
  double fp_rate_target_ = 0;
  int64_t slice_span_ms_ = 0;
  uint64_t checksum_ = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_FILTER_VIEW_H_
