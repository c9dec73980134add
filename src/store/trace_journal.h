// TraceJournal: where the TraceLog reports each change to traced users, so
// a write-ahead log (src/persist/) can record it: traced users survive a
// restart.
//
// The TraceLog calls these while it holds its own lock, right after
// applying the change, and a snapshot exports the TraceLog under that lock
// at the moment the log is rotated (TraceLog::ExportAtCut). So every trace
// change is either in the snapshot or in the log after it, never in both:
// replaying trace entries is not idempotent (an entry would be listed
// twice), unlike replaying Bloom filter inserts. Implementations must be
// quick (buffer, do not write) and must not call back into the TraceLog.
#ifndef EXPOSURE_FILTER_SRC_STORE_TRACE_JOURNAL_H_
#define EXPOSURE_FILTER_SRC_STORE_TRACE_JOURNAL_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace exposure_filter {

struct TracedExposure;

class TraceJournal {
 public:
  virtual ~TraceJournal() = default;
  // These users started being traced at `since_ms` (only the newly added).
  virtual void OnTraceAdd(absl::Span<const absl::string_view> user_ids,
                          int64_t since_ms) = 0;
  // These users stopped being traced (only those that were).
  virtual void OnTraceRemove(absl::Span<const absl::string_view> user_ids) = 0;
  // Entries were appended for one traced user's exposure.
  virtual void OnTraceRecord(absl::string_view surface,
                             const TracedExposure& exposure) = 0;
  // A traced user's entries on `surface` were forgotten (DeleteUser).
  virtual void OnTraceDropUser(absl::string_view surface,
                               absl::string_view user_id) = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_TRACE_JOURNAL_H_
