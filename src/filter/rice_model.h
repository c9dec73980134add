// The expected length of a Rice-coded fingerprint run, the model the
// UserFilter tables store their run fields against (user_filter_layout.cc: k,
// payload bits as differences to the model's, a few units instead of 2-3
// varint bytes). In-memory only: snapshots and GetFilter carry the real
// values (ToParts), so the model may change between releases.
#ifndef EXPOSURE_FILTER_SRC_FILTER_RICE_MODEL_H_
#define EXPOSURE_FILTER_SRC_FILTER_RICE_MODEL_H_

#include <cstdint>

namespace exposure_filter {

// Expected Rice code length in bits of n distinct fingerprints uniform in
// [0, u) at parameter k (0 <= k <= 31, a run's k).
double ModelRiceBits(uint64_t n, uint64_t u, int k);
// ModelRiceBits rounded to the nearest integer.
int64_t ExpectedRiceBits(uint64_t n, uint64_t u, int k);
// The k in [0, 31] that minimizes ModelRiceBits(n, u, k) (0 when u <= n).
int CanonicalRiceK(uint64_t n, uint64_t u);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_RICE_MODEL_H_
