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
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "src/filter/user_filter.h"
#include "src/store/annotated_mutex.h"
#include "src/store/clock.h"
#include "src/store/store_apply_observer.h"
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
  std::string bytes;   // empty when not_modified
  int64_t now_ms = 0;  // the wall clock the live slices were taken at
};

// Explain: why items are filtered for one user.
struct UserExplanation {
  UserFilterStats stats;
  // Per queried item: indices of the live slices that claim it, oldest
  // first (the surface policy maps them to time ranges).
  std::vector<std::vector<int64_t>> claiming_slices;
};

struct ShardUsage {
  uint64_t users = 0;
  uint64_t bytes = 0;
};

// What the sweeper saw in one pass over every shard (DropExpired), per
// surface (indexed by Surface::id): the figures that need a walk over every
// user, so metrics read them from the last sweep instead of walking again.
struct SweepReport {
  // Upper bounds of the estimated-FP-rate histogram of users (cumulative
  // counts: users_by_fp_rate[i] = users whose estimate is <= the bound).
  static constexpr double kFpRateBounds[] = {1e-5, 1e-4, 1e-3, 2e-3, 5e-3,
                                             1e-2, 2e-2, 5e-2, 1e-1, 1.0};
  static constexpr size_t kNumFpRateBounds =
      sizeof(kFpRateBounds) / sizeof(kFpRateBounds[0]);
  struct PerSurface {
    uint64_t users = 0;
    uint64_t live_slices = 0;
    uint64_t users_by_fp_rate[kNumFpRateBounds] = {};
  };
  std::vector<PerSurface> surfaces;
  uint64_t users_removed = 0;  // whose whole history aged out
};

// Memory-ceiling eviction counters since start.
struct EvictionCounts {
  uint64_t users = 0;
  uint64_t bytes = 0;
};

struct StoreUsage {
  std::vector<ShardUsage> shards;
  // Indexed by Surface::id.
  std::vector<ShardUsage> surfaces;
  uint64_t users = 0;
  uint64_t bytes = 0;
  // Empty slots of the shards' hash tables (a flat_hash_map keeps up to
  // half its slots free after growing, and never shrinks on erase); not in
  // `bytes` or any user's, but counted against the memory ceiling.
  uint64_t table_slack_bytes = 0;
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
  // As GetFilter, then calls under_lock(pull) while still holding the
  // user's shard lock: no write to the user applies between the pull and
  // what under_lock does (the session stream registers a subscription
  // there, so every write is in the pull or reported to it after).
  // under_lock may move the bytes out; it must not call into the store.
  using PullConsumer = absl::FunctionRef<void(FilterPull& pull)>;
  void PullUnderLock(const Surface* surface, const FilterPolicy& policy,
                     absl::string_view user_id, absl::string_view if_version,
                     PullConsumer under_lock) const;

  // nullopt when the user holds no live history.
  std::optional<UserFilterStats> GetUserStats(const Surface& surface,
                                              absl::string_view user_id) const;

  // nullopt when the user holds no live history (every item is kept).
  std::optional<UserExplanation> Explain(
      const Surface& surface, absl::string_view user_id,
      absl::Span<const uint64_t> item_hashes) const;

  // True if the user had a filter.
  bool DeleteUser(const Surface& surface, absl::string_view user_id);

  // Drops aged-out slices and empty users, one shard at a time, and seals
  // idle users' open slices (UserFilter::SealIdle). Returns the number of
  // users removed; fills `report` (if given) on the way.
  uint64_t DropExpired(SweepReport* report = nullptr);

  // --- Memory ceiling --------------------------------------------------
  // Caps the accounted bytes of all users (0 = no cap). When a Record takes
  // the store over it, the least recently active users are evicted, an
  // approximate LRU sampled from the recording user's shard (as Redis's
  // allkeys-lru samples keys): each eviction examines the next
  // kEvictionSample entries of the shard's table from a cursor that walks
  // it in slot order (slots are hash-ordered, so a run of them is a random
  // sample) and evicts the one touched longest ago. The user being recorded
  // is never the victim. Set before serving.
  void SetMemoryLimit(uint64_t bytes) { memory_limit_ = bytes; }
  uint64_t memory_limit() const { return memory_limit_; }
  static constexpr int kEvictionSample = 8;
  EvictionCounts evictions() const {
    return {evicted_users_.load(std::memory_order_relaxed),
            evicted_bytes_.load(std::memory_order_relaxed)};
  }
  // Accounted bytes of all users plus the tables' empty slots (what the
  // ceiling compares), kept as a running total so the check costs one
  // relaxed load.
  uint64_t total_bytes() const {
    const int64_t b = total_bytes_.load(std::memory_order_relaxed);
    return b < 0 ? 0 : static_cast<uint64_t>(b);
  }

  StoreUsage Usage(size_t num_surfaces) const;
  int num_shards() const { return static_cast<int>(shards_.size()); }
  const Clock& clock() const { return *clock_; }

  // Bytes a map entry costs beyond the UserFilter's own allocation (which
  // holds the key): the slot and its control byte.
  static size_t EntryOverheadBytes();

  // --- Durability hooks (src/persist/) ---------------------------------
  // Every applied Record and DeleteUser is reported to `journal` under the
  // user's shard lock (store_journal.h); null turns reporting off. Set it
  // while no writer runs; it must outlive its use.
  void SetJournal(StoreJournal* journal);
  // The same reports to a second listener (store_apply_observer.h), after
  // the journal's, plus OnWritesReleased once the locks are released; null
  // turns it off. Set while no writer runs; it must outlive its use.
  void SetApplyObserver(StoreApplyObserver* observer);
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
  // A map entry is the user's filter alone: one pointer to one allocation
  // that also holds the map key (surface id + user id, UserFilter::key) and
  // the time the user was last read or written (monotonic clock ms, so a
  // wall-clock step back does not make the users touched after it look the
  // least recently active; the LRU key of the
  // memory ceiling, UserFilter::Touch). The set hashes and compares the key
  // inside the allocation, and is looked up by key (heterogeneous lookup).
  // `mutable`: a set's elements are const, but only the key must not change.
  struct StoredUser {
    mutable UserFilter filter;
  };
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(absl::string_view key) const {
      return absl::Hash<absl::string_view>()(key);
    }
    size_t operator()(const StoredUser& u) const {
      return (*this)(u.filter.key());
    }
  };
  struct KeyEq {
    using is_transparent = void;
    static absl::string_view KeyOf(absl::string_view key) { return key; }
    static absl::string_view KeyOf(const StoredUser& u) {
      return u.filter.key();
    }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return KeyOf(a) == KeyOf(b);
    }
  };
  using UserSet = absl::flat_hash_set<StoredUser, KeyHash, KeyEq>;

  struct Shard {
    // std::shared_mutex underneath, so TSan sees it (annotated_mutex.h).
    mutable SharedMutex mu;
    UserSet users ABSL_GUARDED_BY(mu);
    // (capacity - size) * slot bytes of `users`, last accounted.
    int64_t table_slack_bytes ABSL_GUARDED_BY(mu) = 0;
    // Key of the next entry the eviction sampler examines ("" = begin()).
    std::string eviction_cursor ABSL_GUARDED_BY(mu);
    // Indexed by surface id; grown on demand.
    std::vector<ShardUsage> surface_usage ABSL_GUARDED_BY(mu);
    uint64_t bytes ABSL_GUARDED_BY(mu) = 0;
  };

  // Map key: 2-byte surface id, then the user id. Surfaces share shards so a
  // user's surfaces sit together.
  static std::string MakeKey(uint16_t surface_id, absl::string_view user_id);
  Shard& ShardFor(absl::string_view user_id) const;
  void Account(Shard& shard, uint16_t surface_id, int64_t users_delta,
               int64_t bytes_delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Re-accounts the table's empty slots after an insert or erase.
  void AccountTable(Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // The pull of GetFilter, under the shard lock the caller holds.
  FilterPull PullLocked(const Shard& shard, const Surface* surface,
                        const FilterPolicy& policy, absl::string_view user_id,
                        absl::string_view if_version) const
      ABSL_SHARED_LOCKS_REQUIRED(shard.mu);
  // Evicts sampled least-recently-active users of `shard` (never `keep`)
  // until the store is under the ceiling or `keep` is all the shard holds.
  void EvictForMemory(Shard& shard, absl::string_view keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const Clock* const clock_;
  const SurfaceRegistry* const surfaces_;
  uint64_t memory_limit_ = 0;
  std::atomic<int64_t> total_bytes_{0};
  std::atomic<uint64_t> evicted_users_{0};
  std::atomic<uint64_t> evicted_bytes_{0};
  std::atomic<StoreJournal*> journal_{nullptr};
  std::atomic<StoreApplyObserver*> observer_{nullptr};
  std::unique_ptr<Shard[]> shards_storage_;
  absl::Span<Shard> shards_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_STORE_SHARDED_FILTER_STORE_H_
