// RoutingFilterReplica: mode B+ (filter_replica.h) across a replicated
// cluster (routing_client.h; docs/session-stream.md, "Failover").
//
// One FilterReplica (one Session stream) per replica. A user's checks go to
// the replica of the first of its owners whose stream is serving: owner 0
// while it is up, so a healthy cluster sees the traffic of one server per
// user. When that owner's stream breaks, its server stops answering pings,
// or it says it lags, the next owner's replica takes the user: it
// subscribes there with the version of the snapshot the first one held
// (if_version; an unchanged filter costs no bytes), and until that snapshot
// and a pong arrive the check is answered through mode A by the
// RoutingClient, with its failover codes, per-try timeout, hedging,
// allow_lagging on the last owner and read-your-writes offsets. When owner
// 0 serves again the user moves back the same way.
//
//   auto router = RoutingClient::Connect(routing_options, creds);
//   auto replica = RoutingFilterReplica::Create(router->get(), {});
//   absl::Status s = (*replica)->Check("homefeed", user, ids, {}, keep);
//
// No silent miss: a copy's pushes are what that copy has applied, so a
// local answer carries the guarantee of FilterReplica against that copy
// (a write acknowledged before t - (--max_serving_lag + max_staleness) is
// in it: a copy lagging more says so in its pongs and is not used). Every
// transition (a broken stream, a sequence gap, a resync, a move to another
// owner) leaves the user unsynced until a new snapshot, and the check goes
// through mode A meanwhile.
//
// Read-your-writes (RoutingClient with ReadYourWritesOptions): a user this
// client wrote is answered locally only by an owner known to have applied
// the write: a mode-A answer carrying the write's offset as min_offsets came
// from that owner, and a pong answers a ping sent after that answer
// returned (the push of the write was queued before the answer, so it is
// ahead of the pong on the stream). Until then the check goes through mode
// A, which carries the offset and fails over like any read.
// Thread-safe.
#ifndef EXPOSURE_FILTER_ROUTING_FILTER_REPLICA_H_
#define EXPOSURE_FILTER_ROUTING_FILTER_REPLICA_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "exposure_filter/filter_replica.h"
#include "exposure_filter/routing_client.h"

namespace exposure_filter {

struct RoutingReplicaStats {
  uint64_t local_checks = 0;   // answered by an owner's local copy
  uint64_t routed_checks = 0;  // mode A through the RoutingClient
  uint64_t failed_checks = 0;
  // Users whose copy moved to another owner's replica (a failover, or back
  // to owner 0), its snapshot's version offered there as if_version.
  uint64_t moves = 0;
  // Checks sent to mode A because the serving owner was not yet known to
  // have applied this client's own write of the user (read-your-writes).
  uint64_t unconfirmed_writes = 0;
  // Checks that found no owner's stream serving (all through mode A).
  uint64_t no_owner_serving = 0;
  std::vector<FilterReplicaStats> replicas;  // by ordinal
};

class RoutingFilterReplica {
 public:
  // One FilterReplica per replica of `router` (on its channels), with
  // `options` (ping_when_idle forced on: a next owner's replica must know
  // whether its server answers before a failover needs it). `router` must
  // outlive the result.
  static absl::StatusOr<std::unique_ptr<RoutingFilterReplica>> Create(
      const RoutingClient* router, const FilterReplicaOptions& options);
  ~RoutingFilterReplica();

  // As FilterReplica::Check, for the user's owners. *served_by (if set):
  // the replica whose copy or answer it was.
  absl::Status Check(absl::string_view surface, absl::string_view user_id,
                     absl::Span<const uint64_t> ids,
                     absl::Span<const std::string> keys, uint8_t* keep,
                     CheckPath* path = nullptr, int32_t* served_by = nullptr);

  // Drops the user's copies on every replica.
  void Forget(absl::string_view surface, absl::string_view user_id);

  RoutingReplicaStats stats() const;
  // Replica `ordinal`'s own replica (tests: Reconnect, stats).
  FilterReplica& ReplicaFor(int32_t ordinal) { return *replicas_[ordinal]; }

 private:
  // A write of this client seen applied: owner `replica` answered a read
  // carrying `offset` as min_offsets, and the answer returned at `at`
  // (steady clock).
  struct Confirmed {
    int64_t offset;
    int32_t replica;
    absl::Time at;
  };

  RoutingFilterReplica(const RoutingClient* router,
                       std::vector<std::unique_ptr<FilterReplica>> replicas);
  absl::Status RoutedCheck(absl::string_view surface, absl::string_view user_id,
                           absl::Span<const uint64_t> ids,
                           absl::Span<const std::string> keys, uint8_t* keep,
                           int64_t written_offset, int32_t* served_by);

  const RoutingClient* const router_;
  const std::vector<std::unique_ptr<FilterReplica>> replicas_;

  mutable absl::Mutex mu_;
  // Bounded by kMaxConfirmed (then cleared: stricter, never weaker).
  absl::flat_hash_map<std::string, Confirmed> confirmed_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> local_{0}, routed_{0}, failed_{0}, moves_{0},
      unconfirmed_{0}, no_owner_{0};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_ROUTING_FILTER_REPLICA_H_
