// TraceLog: exact exposure records of a few selected ("traced") users, for
// debugging. A Bloom filter cannot say what it holds; for a traced user we
// also keep every (item, event time, surface) in plaintext for the retention
// window, as the Tencent team's exposure service does for users under
// investigation, so Explain can tell a real exposure from a false positive.
//
// Bounded: at most `max_users` traced users (adding more is
// RESOURCE_EXHAUSTED and applies nothing), at most `max_entries_per_user`
// entries per user (past it the oldest-recorded entries are dropped and
// counted, never silently). Entries age out exactly like the filter's
// slices: an entry lives until its slice's end plus the retention.
//
// Durability hooks: Export() serialises everything (membership, entries,
// counters) in a versioned byte format; Import() validates and restores it.
// Snapshots store Export(); a write-ahead log replays Add/Remove calls and
// RecordExposure requests (which re-record traced users' entries).
//
// Thread-safe. One mutex: traced users are few, and the RecordExposure path
// skips the lock entirely while nobody is traced.
#ifndef EXPOSURE_FILTER_SRC_STORE_TRACE_LOG_H_
#define EXPOSURE_FILTER_SRC_STORE_TRACE_LOG_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/store/annotated_mutex.h"
#include "src/store/trace_journal.h"

namespace exposure_filter {

struct TraceLimits {
  size_t max_users = 1000;
  size_t max_entries_per_user = 10000;
};

// One user's exposures at one event time, as recorded into the filter.
struct TracedExposure {
  absl::string_view user_id;
  absl::Span<const uint64_t> item_ids;
  absl::Span<const absl::string_view> item_keys;
  int64_t event_ms = 0;       // as recorded (clamped to now)
  int64_t expires_at_ms = 0;  // when the filter slice holding it ages out
};

struct TracedUserInfo {
  std::string user_id;
  int64_t traced_since_ms = 0;
  uint64_t entries = 0;
  uint64_t entries_dropped = 0;
  uint64_t bytes = 0;
};

// What the trace knows about some items of one traced user on one surface.
struct TraceLookup {
  int64_t traced_since_ms = 0;
  uint64_t entries_dropped = 0;
  // Per queried item (ids first, then keys): event times, ascending.
  std::vector<std::vector<int64_t>> exposure_times_ms;
};

struct TraceImportSummary {
  uint64_t users = 0;            // restored
  uint64_t users_skipped = 0;    // beyond max_users
  uint64_t entries = 0;          // restored
  uint64_t entries_dropped = 0;  // beyond max_entries_per_user, or aged out
};

class TraceLog {
 public:
  explicit TraceLog(TraceLimits limits) : limits_(limits) {}
  TraceLog(const TraceLog&) = delete;
  TraceLog& operator=(const TraceLog&) = delete;

  // Starts tracing the users not traced yet (ids already validated). All or
  // nothing: ResourceExhausted if the total would exceed max_users. Returns
  // how many were added.
  absl::StatusOr<size_t> Add(absl::Span<const std::string> user_ids,
                             int64_t now_ms);
  // Stops tracing and forgets the users' entries; returns how many were
  // traced.
  size_t Remove(absl::Span<const std::string> user_ids);
  // Sorted by user id.
  std::vector<TracedUserInfo> List() const;
  size_t size() const { return count_.load(std::memory_order_acquire); }
  bool IsTraced(absl::string_view user_id) const;

  // Appends entries for the exposures whose user is traced; others are
  // ignored.
  void Record(absl::string_view surface,
              absl::Span<const TracedExposure> batch);
  // False if the user is not traced. Entries aged out
  // by `now_ms` are not reported even before DropExpired runs.
  bool Lookup(absl::string_view surface, absl::string_view user_id,
              absl::Span<const uint64_t> item_ids,
              absl::Span<const absl::string_view> item_keys, int64_t now_ms,
              TraceLookup* out) const;
  // DeleteUser: forgets the user's entries on `surface` (tracing goes on).
  void DropUserEntries(absl::string_view surface, absl::string_view user_id);
  // Frees entries whose slice aged out; returns how many.
  uint64_t DropExpired(int64_t now_ms);

  // Everything, in the byte format documented in trace_log.cc.
  std::string Export() const;
  // Replaces the content with `bytes` from Export(). DataLoss (and nothing
  // changed) if they are malformed. Over-limit content is cut to the
  // current limits (users in id order; each user's newest entries) and
  // counted in the summary.
  absl::StatusOr<TraceImportSummary> Import(absl::string_view bytes,
                                            int64_t now_ms);

  const TraceLimits& limits() const { return limits_; }

  // Durability (src/persist/store_durability.h). Every later change is
  // reported to `journal` (null: none) under the lock, in applied order.
  void SetJournal(TraceJournal* journal);
  // Export() taken atomically with `cut` (the log rotation): no change can
  // land between them, so each change is in the export or after the cut.
  absl::StatusOr<std::string> ExportAtCut(
      absl::FunctionRef<absl::Status()> cut);
  // Recovery could not prove that the trace holds every exposure the
  // filters hold (torn or corrupt log): from now on count every traced user
  // as traced since `now_ms`, so Explain never calls an item recorded in the
  // lost part a false positive. Returns how many users were reset.
  size_t ResetTracedSince(int64_t now_ms);

 private:
  struct Entry {
    std::string surface;
    std::string item_key;  // when is_key
    uint64_t item_id = 0;  // when !is_key
    int64_t event_ms = 0;
    int64_t expires_at_ms = 0;
    bool is_key = false;
  };
  struct TracedUser {
    int64_t traced_since_ms = 0;
    uint64_t entries_dropped = 0;
    uint64_t bytes = 0;
    std::deque<Entry> entries;  // in recording order; oldest dropped first
  };

  static uint64_t EntryBytes(const Entry& e);
  std::string ExportLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void AppendLocked(TracedUser& user, Entry entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TraceLimits limits_;
  // TSan-visible (annotated_mutex.h), like the store's shard locks.
  mutable SharedMutex mu_;
  absl::flat_hash_map<std::string, TracedUser> users_ ABSL_GUARDED_BY(mu_);
  // users_.size(), readable without the lock for the RecordExposure fast path.
  std::atomic<size_t> count_{0};
  TraceJournal* journal_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_TRACE_LOG_H_
