// ReadYourWritesTokens: a routing client's memory of the Kafka offsets its
// own writes got (docs/scale-out.md "Consistency"). A
// replicated server answers RecordExposure/DeleteUser with written_offsets
// (partition -> offset of the call's last message there); a later read of
// the same user carries its partition's offset as min_offsets, and a copy
// that has not applied it answers UNAVAILABLE, so the client fails over to
// an owner that has (or retries).
//
// Per user, bounded: past max_users the per-user entries are folded into one
// floor per partition (the highest offset folded) and cleared. A read then
// waits for max(its user's offset, its partition's floor): stricter for the
// users of a folded partition (a read may wait for another user's write),
// never weaker, and memory stays max_users entries plus one per partition.
// Thread-safe.
#ifndef EXPOSURE_FILTER_SRC_CLIENT_READ_YOUR_WRITES_TOKENS_H_
#define EXPOSURE_FILTER_SRC_CLIENT_READ_YOUR_WRITES_TOKENS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace exposure_filter {

class ReadYourWritesTokens {
 public:
  explicit ReadYourWritesTokens(size_t max_users) : max_users_(max_users) {}

  // `user_id` (in `partition`) was written at `offset`; keeps the highest.
  void Record(absl::string_view user_id, int32_t partition, int64_t offset);
  // The offset a read of `user_id` (in `partition`) must see applied, if
  // this client wrote it (or a folded user of its partition).
  std::optional<int64_t> Lookup(absl::string_view user_id,
                                int32_t partition) const;
  size_t users() const;

 private:
  struct Token {
    int32_t partition;
    int64_t offset;
  };
  const size_t max_users_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Token> users_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int32_t, int64_t> floors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_CLIENT_READ_YOUR_WRITES_TOKENS_H_
