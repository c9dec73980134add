// ShardedFilterStore: every user's UserFilter, per surface, in memory.
//
// Users are spread over a power-of-two number of shards by the top bits of the
// XXH3 hash of their id (as LevelDB's ShardedLRUCache does); each shard is a
// flat hash map guarded by its own reader/writer mutex, so there is no global
// lock on the request path and lookups of different users rarely contend.
// Memory is accounted per shard and per surface as filters change.
//
// Callers validate input (ids, lengths, times) first; the store assumes it.
#ifndef EXPOSURE_FILTER_SRC_STORE_SHARDED_FILTER_STORE_H_
#define EXPOSURE_FILTER_SRC_STORE_SHARDED_FILTER_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "src/filter/user_filter.h"
#include "src/store/annotated_mutex.h"
#include "src/store/clock.h"
#include "src/store/store_journal.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {

// One user's exposures at one event time, already hashed.
struct UserExposures {
  absl::string_view user_id;
  absl::Span<const uint64_t> item_hashes;
  int64_t event_ms = 0;  // 0 = now; times after now are recorded at now
};

struct RecordCounts {
  uint64_t recorded = 0;  // items accepted (new or already present)
  uint64_t expired = 0;   // older than the retention window: ignored
};

struct FilterPull {
  bool not_modified = false;
  std::string version;
  std::string bytes;  // empty when not_modified
};

struct ShardUsage {
  uint64_t users = 0;
  uint64_t bytes = 0;
};

struct StoreUsage {
  std::vector<ShardUsage> shards;
  // Indexed by Surface::id.
  std::vector<ShardUsage> surfaces;
  uint64_t users = 0;
  uint64_t bytes = 0;
};

class ShardedFilterStore {
 public:
  // num_shards must be a power of two in [1, 65536]. `surfaces` resolves the
  // policy of each stored filter when aging; both must outlive the store.
  ShardedFilterStore(int num_shards, const Clock* clock,
                     const SurfaceRegistry* surfaces);
  ShardedFilterStore(const ShardedFilterStore&) = delete;
  ShardedFilterStore& operator=(const ShardedFilterStore&) = delete;

  RecordCounts Record(const Surface& surface,
                      absl::Span<const UserExposures> batch);

  // Clears keep[i] for every item_hashes[i] the user was shown within the
  // surface's window. An unknown user keeps everything.
  void RemoveExposed(const Surface& surface, absl::string_view user_id,
                     absl::Span<const uint64_t> item_hashes,
                     uint8_t* keep) const;

  // The user's filter in the portable format, or not_modified when its
  // version equals `if_version`. `surface` may be null (never written).
  FilterPull GetFilter(const Surface* surface, const FilterPolicy& policy,
                       absl::string_view user_id,
                       absl::string_view if_version) const;

  // nullopt when the user holds no live history.
  std::optional<UserFilterStats> GetUserStats(const Surface& surface,
                                              absl::string_view user_id) const;

  // True if the user had a filter.
  bool DeleteUser(const Surface& surface, absl::string_view user_id);

  // Drops aged-out slices and empty users, one shard at a time. Returns the
  // number of users removed.
  uint64_t DropExpired();

  StoreUsage Usage(size_t num_surfaces) const;
  int num_shards() const { return static_cast<int>(shards_.size()); }
  const Clock& clock() const { return *clock_; }

  // Bytes a map entry costs beyond the UserFilter's own heap: the slot and
  // an out-of-line key.
  static size_t EntryOverheadBytes(const std::string& key);

  // --- Durability hooks (src/persist/) ---------------------------------
  // Every applied Record and DeleteUser is reported to `journal` under the
  // user's shard lock (store_journal.h); null turns reporting off. Set it
  // while no writer runs; it must outlive its use.
  void SetJournal(StoreJournal* journal);
  // Calls visit(surface, user_id, filter) for every user in shard `shard`,
  // holding that shard's lock (shared) and no other for the whole visit:
  // a snapshot stops at most one shard's writers at a time.
  using UserVisitor =
      absl::FunctionRef<void(const Surface& surface, absl::string_view user_id,
                             const UserFilter& filter)>;
  void VisitShard(int shard, UserVisitor visit) const;
  // Installs a filter decoded from a snapshot (replacing any the user had),
  // with accounting. Not journaled.
  void LoadUser(const Surface& surface, absl::string_view user_id,
                UserFilter filter);
  // Forgets every user (recovery falling back to an older snapshot).
  void Clear();

 private:
  struct Shard {
    // std::shared_mutex underneath, so TSan sees it (annotated_mutex.h).
    mutable SharedMutex mu;
    absl::flat_hash_map<std::string, UserFilter> users ABSL_GUARDED_BY(mu);
    // Indexed by surface id; grown on demand.
    std::vector<ShardUsage> surface_usage ABSL_GUARDED_BY(mu);
    uint64_t bytes ABSL_GUARDED_BY(mu) = 0;
  };

  // Map key: 2-byte surface id, then the user id. Surfaces share shards so a
  // user's surfaces sit together.
  static std::string MakeKey(uint16_t surface_id, absl::string_view user_id);
  Shard& ShardFor(absl::string_view user_id) const;
  static void Account(Shard& shard, uint16_t surface_id, int64_t users_delta,
                      int64_t bytes_delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const Clock* const clock_;
  const SurfaceRegistry* const surfaces_;
  std::atomic<StoreJournal*> journal_{nullptr};
  std::unique_ptr<Shard[]> shards_storage_;
  absl::Span<Shard> shards_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_SHARDED_FILTER_STORE_H_
