// StoreJournal: where the store reports each mutation it applies, so a
// write-ahead log (src/persist/) can record it without the store knowing
// about files.
//
// The store calls these while it holds the user's shard lock, right after
// applying the change. So for any one user the journal's order is the order
// the changes were applied in (a Record racing a DeleteUser of the same user
// replays exactly as it happened), and a snapshot that reads a shard under
// its lock sees every change journaled before it took the lock.
// Implementations must therefore be quick (buffer, do not write) and must not
// call back into the store.
#ifndef EXPOSURE_FILTER_SRC_STORE_STORE_JOURNAL_H_
#define EXPOSURE_FILTER_SRC_STORE_STORE_JOURNAL_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace exposure_filter {

class StoreJournal {
 public:
  virtual ~StoreJournal() = default;
  // Items with these hashes were recorded for the user at `event_ms` (the
  // resolved event time, never 0).
  virtual void OnRecord(absl::string_view surface, absl::string_view user_id,
                        int64_t event_ms,
                        absl::Span<const uint64_t> item_hashes) = 0;
  // The user's filter on the surface was deleted.
  virtual void OnDelete(absl::string_view surface,
                        absl::string_view user_id) = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_STORE_JOURNAL_H_
