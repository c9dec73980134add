// DropUnownedUsers: after recovery, forget the users this replica does not
// own under the current --partitions/--replicas (resharding).
//
// A snapshot written under another N (or P) holds users that now belong to
// another replica. Serving them would answer FilterRecalled from history
// that stops growing the moment their owner changed (their new exposures go
// to the new owner), i.e. stale data; keeping them only costs memory. They
// are deleted through the store, so the deletions are journaled like any
// DeleteUser and the next snapshot no longer holds them.
#ifndef EXPOSURE_FILTER_SRC_SERVER_UNOWNED_USERS_H_
#define EXPOSURE_FILTER_SRC_SERVER_UNOWNED_USERS_H_

#include <cstdint>

#include "src/cluster/replica_ownership.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/trace_log.h"

namespace exposure_filter {

// Deletes every (surface, user) filter whose user `ownership` does not own,
// and those users' trace entries; returns how many filters were deleted.
// Does nothing when not partitioned. Call before serving.
uint64_t DropUnownedUsers(const ReplicaOwnership& ownership,
                          ShardedFilterStore* store, TraceLog* trace_log);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_UNOWNED_USERS_H_
