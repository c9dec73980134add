#include "src/server/unowned_users.h"

#include <string>
#include <utility>
#include <vector>

namespace exposure_filter {

uint64_t DropUnownedUsers(const ReplicaOwnership& ownership,
                          ShardedFilterStore* store, TraceLog* trace_log) {
  if (!ownership.partitioned()) return 0;
  uint64_t dropped = 0;
  std::vector<std::pair<const Surface*, std::string>> unowned;
  for (int shard = 0; shard < store->num_shards(); ++shard) {
    // Collected under the shard's shared lock, deleted after it is released
    // (DeleteUser takes the same lock exclusively).
    unowned.clear();
    store->VisitShard(shard,
                      [&](const Surface& surface, absl::string_view user_id,
                          const UserFilter& /*filter*/) {
                        if (!ownership.OwnsUser(user_id)) {
                          unowned.emplace_back(&surface, std::string(user_id));
                        }
                      });
    for (const auto& [surface, user_id] : unowned) {
      if (store->DeleteUser(*surface, user_id)) ++dropped;
      if (trace_log != nullptr) {
        trace_log->DropUserEntries(surface->name, user_id);
      }
    }
  }
  return dropped;
}

}  // namespace exposure_filter
