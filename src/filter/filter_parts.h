// FilterParts: a user filter taken apart into plain values, the contract
// between the in-memory filter (UserFilter::ToParts / FromParts) and what
// stores or ships it (snapshot and WAL records, GetFilter format 2).
//
// A slice holds legacy format-1 Bloom segments (data written by a release
// before format 2, read-only until the slice ages out), format-2
// fingerprint runs, or both (a legacy slice that received items after the
// upgrade: UserFilter::ToParts). A run contributes n / U to the user's false
// positive bound F = sum over live runs of n_r / U_r (docs/format2-design.md,
// eq. 2); `capacity` is the most distinct fingerprints the sizing policy let
// the run hold, so capacity / U is the share of delta it was given.
#ifndef EXPOSURE_FILTER_SRC_FILTER_FILTER_PARTS_H_
#define EXPOSURE_FILTER_SRC_FILTER_FILTER_PARTS_H_

#include <cstdint>
#include <vector>

#include "src/filter/bloom_segment.h"
#include "src/filter/fingerprint_run.h"

namespace exposure_filter {

struct RunPart {
  FingerprintRun run;     // its fingerprints, precision b, universe U, Rice k
  uint32_t capacity = 0;  // most distinct fingerprints the policy lets it hold
                          // (>= run.count())
  bool open = false;      // a prefix run still taking writes (false: sealed)
};

struct SlicePart {
  int64_t index = 0;  // slice covers [index*span, (index+1)*span)
  int64_t min_event_ms = 0, max_event_ms = 0;
  std::vector<BloomSegment> bloom_segments;  // legacy format-1 slices only
  std::vector<RunPart> runs;                 // format-2 runs
};

struct FilterParts {
  std::vector<SlicePart> slices;  // ascending index
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_FILTER_PARTS_H_
