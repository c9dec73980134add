// Encodes a UserFilter's live slices in the portable filter format
// (docs/filter-format.md, include/exposure_filter/filter_format.h).
//
// The format's trailing XXH3-64 checksum covers every byte before it, so it
// doubles as the filter's version: it changes exactly when the bits, counts or
// set of live slices change (including a slice aging out). FilterFingerprint
// computes it without materializing the bytes, for if_version checks.
#ifndef EXPOSURE_FILTER_SRC_FILTER_FILTER_ENCODER_H_
#define EXPOSURE_FILTER_SRC_FILTER_FILTER_ENCODER_H_

#include <cstdint>
#include <string>

#include "src/filter/filter_policy.h"
#include "src/filter/user_filter.h"

namespace exposure_filter {

// Appends the encoding to *out (cleared first) and returns its checksum.
// `filter` may be null: an unknown user has an empty filter.
uint64_t EncodeFilter(const UserFilter* filter, const FilterPolicy& policy,
                      int64_t now_ms, std::string* out);

// The checksum EncodeFilter would return, without building the bytes.
uint64_t FilterFingerprint(const UserFilter* filter,
                           const FilterPolicy& policy, int64_t now_ms);

// 16 lowercase hex digits of a fingerprint: the GetFilter `version`.
std::string FilterVersionString(uint64_t fingerprint);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_FILTER_ENCODER_H_
