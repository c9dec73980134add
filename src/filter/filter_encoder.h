// Encodes a user's live slices in the portable filter format, version 2
// (docs/filter-format.md, include/exposure_filter/filter_format.h): per
// slice, its legacy Bloom segments and its fingerprint runs.
//
// The format's trailing XXH3-64 checksum covers every byte before it, so it
// doubles as the filter's version: it changes whenever the encoded bytes
// change (a new fingerprint or bit, a slice opening or aging out, a run
// re-encoded) and stays put otherwise. FilterFingerprint computes it without
// materializing the bytes, for if_version checks.
#ifndef EXPOSURE_FILTER_SRC_FILTER_FILTER_ENCODER_H_
#define EXPOSURE_FILTER_SRC_FILTER_FILTER_ENCODER_H_

#include <cstdint>
#include <string>

#include "src/filter/filter_parts.h"
#include "src/filter/filter_policy.h"
#include "src/filter/user_filter.h"

namespace exposure_filter {

// Appends the format-2 encoding of the parts' live slices (policy.SliceLive
// at `now_ms`) to *out (cleared first) and returns its checksum. Slices with
// no content and runs with no fingerprint are left out (they claim
// nothing). `parts` may be null: an unknown user has an empty filter.
uint64_t EncodeFilterParts(const FilterParts* parts, const FilterPolicy& policy,
                           int64_t now_ms, std::string* out);
// The checksum EncodeFilterParts would return, without building the bytes.
uint64_t FilterPartsFingerprint(const FilterParts* parts,
                                const FilterPolicy& policy, int64_t now_ms);

// The same for a UserFilter (taken apart with ToParts); `filter` may be null.
uint64_t EncodeFilter(const UserFilter* filter, const FilterPolicy& policy,
                      int64_t now_ms, std::string* out);
uint64_t FilterFingerprint(const UserFilter* filter, const FilterPolicy& policy,
                           int64_t now_ms);

// 16 lowercase hex digits of a fingerprint: the GetFilter `version`.
std::string FilterVersionString(uint64_t fingerprint);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_FILTER_ENCODER_H_
