// Small helpers shared by the store tests: item hashes, one-call Record and
// RemoveExposed wrappers.
#ifndef EXPOSURE_FILTER_TESTS_STORE_STORE_TEST_UTIL_H_
#define EXPOSURE_FILTER_TESTS_STORE_STORE_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "exposure_filter/item_hash.h"
#include "src/store/sharded_filter_store.h"

namespace exposure_filter::testing_util {

// Default slice span (5 days) in ms, and a start time (Nov 2023) in the
// middle of one such slice, so small clock moves never cross a slice boundary.
inline constexpr int64_t kDefaultSpanMs = int64_t{5} * 86'400'000;
inline constexpr int64_t kStartMs = 3935 * kDefaultSpanMs + kDefaultSpanMs / 2;

// Hashes of the numeric ids first, first+1, ..., first+n-1.
inline std::vector<uint64_t> IdHashes(uint64_t first, int n) {
  std::vector<uint64_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) out.push_back(HashItemId(first + i));
  return out;
}

inline RecordCounts RecordOne(ShardedFilterStore& store, const Surface& surface,
                              const std::string& user,
                              const std::vector<uint64_t>& hashes,
                              int64_t event_ms = 0) {
  const UserExposures ue{user, hashes, event_ms};
  return store.Record(surface, {&ue, 1});
}

// keep[i] after RemoveExposed: 1 = kept, 0 = removed.
inline std::vector<uint8_t> KeepMask(const ShardedFilterStore& store,
                                     const Surface& surface,
                                     const std::string& user,
                                     const std::vector<uint64_t>& hashes) {
  std::vector<uint8_t> keep(hashes.size(), 1);
  store.RemoveExposed(surface, user, hashes, keep.data());
  return keep;
}

inline int CountRemoved(const std::vector<uint8_t>& keep) {
  int removed = 0;
  for (uint8_t k : keep) removed += k == 0;
  return removed;
}

}  // namespace exposure_filter::testing_util

#endif  // EXPOSURE_FILTER_TESTS_STORE_STORE_TEST_UTIL_H_
