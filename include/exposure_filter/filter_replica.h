// FilterReplica: mode B+ for recall servers (docs/session-stream.md). One
// Session stream to a server; each user checked is subscribed on first
// use, its filter arrives once and every exposure the server applies for
// it after that is pushed, so a check of thousands of candidates is a
// local computation with no call at all. Whenever the local copy cannot be
// trusted the check is answered through mode A instead, on the stream (or
// by the unary FilterRecalled while the stream is down): the copy is not
// synced yet (first snapshot, a sequence gap, a resync, an expired lease),
// the last pong answers a ping older than `max_staleness` (or the server
// says it lags), or a slice is about to age out and the server's clock
// cannot be told from here. So a check never misses an exposure the server
// acknowledged more than `max_staleness` before it.
//
//   auto replica = FilterReplica::Connect(channel, {});
//   std::vector<uint8_t> keep(ids.size());
//   absl::Status s = (*replica)->Check("homefeed", user, ids, {}, keep.data());
//
// The local answer is FilterRecalled's, with one difference in the safe
// direction: a fresh candidate that collides only with fingerprints recorded
// after the last snapshot is kept here and removed there (a false positive
// the server has and the replica does not; at most the FP mass those items
// add, within the surface's delta). A fresh snapshot (the replica compacts
// after `compact_after_items` pushed items) makes them identical again.
//
// Memory is bounded by `max_bytes` (filters and pushed items of all users):
// past it the least recently checked user is unsubscribed and dropped.
// Thread-safe; one replica per server. Across a replicated cluster,
// RoutingFilterReplica (routing_filter_replica.h) keeps one per owner and
// moves a user to the next owner when its owner's stream breaks.
#ifndef EXPOSURE_FILTER_FILTER_REPLICA_H_
#define EXPOSURE_FILTER_FILTER_REPLICA_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace exposure_filter {

struct FilterReplicaOptions {
  // Filters and pushed items of all users together (LRU beyond it).
  size_t max_bytes = size_t{256} << 20;
  // Runs filed for repeated checks (FilterView::FileRuns) of the users
  // checked most recently, least recently used dropped beyond it; 0 files
  // none. A user's second local check of the same filter files its runs
  // (~44 KiB at 2,000 items; a user checked once costs nothing) and later
  // checks pay only the probe. Apart from max_bytes: a dropped index
  // costs one filing again, a dropped user a snapshot.
  size_t max_index_bytes = size_t{32} << 20;
  // A check is answered locally only if a ping sent at most this long ago
  // has been answered (the guarantee's bound).
  absl::Duration max_staleness = absl::Milliseconds(100);
  // How often the replica pings while it holds users; well under
  // max_staleness, so a healthy stream stays fresh.
  absl::Duration ping_interval = absl::Milliseconds(20);
  // A check's wait for a user's first snapshot, and for a mode-A answer.
  absl::Duration deadline = absl::Milliseconds(500);
  // Pushed items held for one user before re-subscribing for a snapshot
  // that holds them (~1.5 bytes per item in the filter against ~24 here).
  size_t compact_after_items = 4096;
  // Wait before reconnecting a stream that ended.
  absl::Duration reconnect_backoff = absl::Milliseconds(100);
  // Ping even while no user is held. A replica pings only to keep its users
  // fresh; one that a router keeps for a user's next owner holds nobody
  // until a failover, and must still know whether its server answers.
  bool ping_when_idle = false;
};

// Positive durations, ping_interval < max_staleness, max_bytes >= 1 MiB,
// compact_after_items >= 1.
absl::Status ValidateFilterReplicaOptions(const FilterReplicaOptions& options);

// Where a check was answered.
enum class CheckPath { kLocal, kStream, kUnary };

struct FilterReplicaStats {
  uint64_t local_checks = 0;   // answered from the local copy
  uint64_t stream_checks = 0;  // mode A on the stream
  uint64_t unary_checks = 0;   // mode A by unary call (stream down)
  uint64_t failed_checks = 0;
  // Why checks went to mode A.
  uint64_t not_synced = 0;  // no snapshot yet, gap, resync, lease expired
  uint64_t stale = 0;       // no pong within max_staleness, or lagging
  uint64_t aging = 0;       // a slice at its expiry, server clock unsure
  uint64_t snapshots = 0;
  uint64_t not_modified = 0;
  uint64_t pushes = 0;
  uint64_t pushed_items = 0;
  uint64_t noted_items = 0;  // NoteShown items held ahead of their push
  uint64_t gaps = 0;         // pushes out of sequence (then resubscribed)
  uint64_t resyncs = 0;      // resync notices from the server
  uint64_t resets = 0;       // users deleted on the server
  uint64_t expired = 0;      // leases the server let run out
  uint64_t compactions = 0;
  uint64_t reconnects = 0;
  uint64_t evictions = 0;  // users dropped for max_bytes
  uint64_t bytes_held = 0;
  uint64_t users_held = 0;
  uint64_t indexed_checks = 0;  // local checks through filed runs
  uint64_t index_bytes = 0;     // filed runs held (max_index_bytes)
  // Subscribes sent and not yet answered (by a snapshot or an error); a
  // user forgotten or evicted takes its own off.
  uint64_t subscribes_in_flight = 0;
  // Now minus the send time of the newest ping answered: how far behind
  // the server a local answer may be (InfiniteDuration before any pong).
  absl::Duration staleness = absl::InfiniteDuration();

  double hit_ratio() const {
    const uint64_t all = local_checks + stream_checks + unary_checks;
    return all == 0 ? 0.0 : static_cast<double>(local_checks) / all;
  }
};

class PulledFilter;

class FilterReplica {
 public:
  // Opens the stream on `channel` (the server, or one owner).
  static absl::StatusOr<std::unique_ptr<FilterReplica>> Connect(
      std::shared_ptr<grpc::ChannelInterface> channel,
      const FilterReplicaOptions& options);
  ~FilterReplica();
  FilterReplica(const FilterReplica&) = delete;
  FilterReplica& operator=(const FilterReplica&) = delete;

  // keep[i] = 1 to keep candidate i (ids first, then keys), 0 if the user
  // may have been shown it; `keep` holds ids.size() + keys.size() bytes.
  // Errors are the server's (INVALID_ARGUMENT naming the field, not the
  // owner, ...), or DEADLINE_EXCEEDED / UNAVAILABLE when no answer came.
  absl::Status Check(absl::string_view surface, absl::string_view user_id,
                     absl::Span<const uint64_t> ids,
                     absl::Span<const std::string> keys, uint8_t* keep,
                     CheckPath* path = nullptr);

  // Returns once a ping sent now is answered: every write the server had
  // acknowledged before the call is then in the local copies of synced
  // users (or the replica knows they are not synced).
  absl::Status Sync();

  // Drops the user's copy and unsubscribes it (its feed session ended,
  // say); the next check subscribes again.
  void Forget(absl::string_view surface, absl::string_view user_id);

  // Items this process just showed the user (handed to the exposure
  // logger): this replica's checks remove them at once. A feed's next
  // request can come before the server's push of that write does, and a
  // local answer within max_staleness would then keep them (an item shown
  // twice in a row). Held as pushed items (they age and count as those
  // do) until a snapshot replaces the copy by the server's state, so a
  // snapshot taken before the server applied the write drops them again.
  // A no-op for a user not held here or not synced (its checks go to the
  // server then).
  void NoteShown(absl::string_view surface, absl::string_view user_id,
                 absl::Span<const uint64_t> ids);

  // Ends the stream and opens a new one: every user is answered through
  // mode A until its new snapshot. The replica does this on its own when
  // pings go unanswered for 10 x max_staleness (at least 1 s): a server
  // that stopped answering, or a connection gone silent.
  void Reconnect();

  FilterReplicaStats stats() const;

  // For a router that keeps one replica per owner (routing_filter_replica.h).
  //
  // Answers from the local copy and returns true when Check would; else
  // returns false having only (re)subscribed the user (and counted why), and
  // the caller answers through mode A itself. A user's first check waits
  // for its snapshot as Check does. `fresh_since` (steady_clock time, as
  // MonotonicTime() reads it): answer only on a pong to a ping sent at or
  // after it, which orders the answer after every write the server had
  // applied by then (a read-your-writes point). `seed`: a snapshot filter
  // another owner's replica held for the user, adopted when this replica
  // holds none, so the subscribe carries its version as if_version (an
  // owner whose copy has the same version answers not_modified, no bytes).
  bool CheckLocal(absl::string_view surface, absl::string_view user_id,
                  absl::Span<const uint64_t> ids,
                  absl::Span<const std::string> keys, uint8_t* keep,
                  absl::Time fresh_since,
                  std::shared_ptr<const PulledFilter> seed);
  // The stream is open, the server answered a ping sent within
  // max(1 s, 10 x max_staleness) (the silence after which the replica
  // reconnects) and did not say it lags: a user can be served here.
  bool Serving() const;
  // Forgets the user (as Forget) and returns the snapshot filter held for
  // it, or null.
  std::shared_ptr<const PulledFilter> Release(absl::string_view surface,
                                              absl::string_view user_id);

  class Impl;

 private:
  explicit FilterReplica(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_FILTER_REPLICA_H_
