#include "src/store/sharded_filter_store.h"

#include <xxhash.h>

#include <algorithm>

#include "src/filter/filter_encoder.h"

namespace exposure_filter {
namespace {

// Seed for the user-id hash that picks a shard; distinct from the item seed so
// shard choice and Bloom probes are unrelated.
constexpr uint64_t kUserShardSeed = 0x7265737573ull;  // "users"

// All bytes one map entry holds: the user's filter (with its key) plus slot.
int64_t EntryBytes(const UserFilter& filter) {
  return static_cast<int64_t>(filter.MemoryBytes() +
                              ShardedFilterStore::EntryOverheadBytes());
}

// Inverse of MakeKey's 2-byte little-endian surface id prefix.
uint16_t SurfaceIdOfKey(absl::string_view key) {
  return static_cast<uint16_t>(static_cast<unsigned char>(key[0]) |
                               (static_cast<unsigned char>(key[1]) << 8));
}

// Fills `runs` and `bloom_segments` of a user's stats, which
// UserFilter::Stats leaves at 0 (it adds both kinds into `segments`, a run's
// tail apart): counted as GetFilter encodes them, from the same live view
// (UserFilter::Live: a run and its tail are one run; an empty one is left
// out).
void CountRunsAndBloomSegments(const UserFilter& filter,
                               const FilterPolicy& policy, int64_t now,
                               UserFilterStats* stats) {
  for (const UserFilter::LiveSlice& live : filter.Live(policy, now)) {
    uint32_t runs = 0;
    for (const UserFilter::LiveRun& r : live.runs) {
      if (r.main.count() + r.tail.count() > 0) ++runs;
    }
    const auto bloom = static_cast<uint32_t>(live.bloom_segments.size());
    stats->runs += runs;
    stats->bloom_segments += bloom;
    const int64_t start_ms = policy.SliceStartMs(live.index);
    for (SliceStats& s : stats->slice_stats) {
      if (s.start_ms != start_ms) continue;
      s.runs = runs;
      s.bloom_segments = bloom;
    }
  }
}

// Adds one user's live slices and estimated FP rate to the sweep report.
void Observe(const Surface& surface, const UserFilter& filter, int64_t now,
             SweepReport* report) {
  if (report->surfaces.size() <= surface.id) {
    report->surfaces.resize(surface.id + 1);
  }
  SweepReport::PerSurface& out = report->surfaces[surface.id];
  // F, the union bound over the live runs (and legacy Bloom slices).
  const UserFilterStats st = filter.Stats(surface.policy, now);
  out.live_slices += st.slices;
  const double fp = st.estimated_fp_rate;
  ++out.users;
  for (size_t i = 0; i < SweepReport::kNumFpRateBounds; ++i) {
    if (fp <= SweepReport::kFpRateBounds[i]) ++out.users_by_fp_rate[i];
  }
}

}  // namespace

ShardedFilterStore::ShardedFilterStore(int num_shards, const Clock* clock,
                                       const SurfaceRegistry* surfaces)
    : clock_(clock),
      surfaces_(surfaces),
      shards_storage_(new Shard[num_shards]),
      shards_(shards_storage_.get(), static_cast<size_t>(num_shards)) {}

std::string ShardedFilterStore::MakeKey(uint16_t surface_id,
                                        absl::string_view user_id) {
  std::string key;
  key.reserve(2 + user_id.size());
  key.push_back(static_cast<char>(surface_id & 0xff));
  key.push_back(static_cast<char>(surface_id >> 8));
  key.append(user_id.data(), user_id.size());
  return key;
}

size_t ShardedFilterStore::EntryOverheadBytes() {
  // A flat_hash_set slot holds the element plus one control byte.
  return sizeof(StoredUser) + 1;
}

ShardedFilterStore::Shard& ShardedFilterStore::ShardFor(
    absl::string_view user_id) const {
  const uint64_t h =
      XXH3_64bits_withSeed(user_id.data(), user_id.size(), kUserShardSeed);
  // Multiply-shift of the top 32 bits: for a power-of-two count this is the
  // hash's top log2(n) bits.
  return shards_[((h >> 32) * shards_.size()) >> 32];
}

void ShardedFilterStore::Account(Shard& shard, uint16_t surface_id,
                                 int64_t users_delta, int64_t bytes_delta) {
  total_bytes_.fetch_add(bytes_delta, std::memory_order_relaxed);
  if (shard.surface_usage.size() <= surface_id) {
    shard.surface_usage.resize(surface_id + 1);
  }
  ShardUsage& u = shard.surface_usage[surface_id];
  u.users += users_delta;
  u.bytes += bytes_delta;
  shard.bytes += bytes_delta;
}

void ShardedFilterStore::AccountTable(Shard& shard) {
  constexpr int64_t kSlotBytes = sizeof(StoredUser) + 1;  // + control
  const int64_t slack =
      static_cast<int64_t>(shard.users.capacity() - shard.users.size()) *
      kSlotBytes;
  total_bytes_.fetch_add(slack - shard.table_slack_bytes,
                         std::memory_order_relaxed);
  shard.table_slack_bytes = slack;
}

RecordCounts ShardedFilterStore::Record(const Surface& surface,
                                        absl::Span<const UserExposures> batch) {
  const int64_t now = clock_->NowMs();
  const FilterPolicy& policy = surface.policy;
  RecordCounts counts;
  for (const UserExposures& ue : batch) {
    if (ue.item_hashes.empty()) continue;
    // Clock skew: an event a little ahead of our clock is recorded now.
    const int64_t event = ue.event_ms == 0 ? now : std::min(ue.event_ms, now);
    if (policy.EventExpired(event, now)) {
      counts.expired += ue.item_hashes.size();
      continue;
    }
    counts.recorded += ue.item_hashes.size();
    const std::string key = MakeKey(surface.id, ue.user_id);
    Shard& shard = ShardFor(ue.user_id);
    WriterLock lock(&shard.mu);
    auto it = shard.users.find(key);
    const bool inserted = it == shard.users.end();
    if (inserted) it = shard.users.insert(StoredUser{UserFilter(key)}).first;
    UserFilter& filter = it->filter;
    const int64_t before = inserted ? 0 : EntryBytes(filter);
    filter.DropExpired(policy, now);
    filter.Record(policy, ue.item_hashes, event);
    filter.Touch(clock_->MonotonicMs());
    if (StoreJournal* journal = journal_.load(std::memory_order_acquire)) {
      journal->OnRecord(surface.name, ue.user_id, event, ue.item_hashes);
    }
    if (StoreApplyObserver* observer =
            observer_.load(std::memory_order_acquire)) {
      observer->OnRecord(surface.name, ue.user_id, event, ue.item_hashes);
    }
    Account(shard, surface.id, inserted ? 1 : 0, EntryBytes(filter) - before);
    if (inserted) AccountTable(shard);
    if (memory_limit_ != 0 && total_bytes() > memory_limit_) {
      EvictForMemory(shard, key);
    }
  }
  if (StoreApplyObserver* observer =
          observer_.load(std::memory_order_acquire)) {
    observer->OnWritesReleased();
  }
  return counts;
}

void ShardedFilterStore::EvictForMemory(Shard& shard, absl::string_view keep) {
  auto& users = shard.users;
  while (total_bytes() > memory_limit_ && users.size() > 1) {
    auto it = shard.eviction_cursor.empty() ? users.begin()
                                            : users.find(shard.eviction_cursor);
    if (it == users.end()) it = users.begin();
    auto victim = users.end();
    int64_t victim_active = 0;
    const size_t sample = std::min<size_t>(kEvictionSample, users.size());
    for (size_t i = 0; i < sample; ++i, ++it) {
      if (it == users.end()) it = users.begin();
      const int64_t active = it->filter.last_active_ms();
      if (it->filter.key() != keep &&
          (victim == users.end() || active < victim_active)) {
        victim = it;
        victim_active = active;
      }
    }
    if (it == users.end()) {
      shard.eviction_cursor.clear();
    } else {
      shard.eviction_cursor = std::string(it->filter.key());
    }
    if (victim == users.end()) break;  // only `keep` was sampled
    const absl::string_view victim_key = victim->filter.key();
    const int64_t bytes = EntryBytes(victim->filter);
    Account(shard, SurfaceIdOfKey(victim_key), -1, -bytes);
    // Journaled as a delete, so recovery does not bring the user back;
    // subscribers learn the user's history is gone.
    if (const Surface* surface = surfaces_->ById(SurfaceIdOfKey(victim_key))) {
      if (StoreJournal* journal = journal_.load(std::memory_order_acquire)) {
        journal->OnDelete(surface->name, victim_key.substr(2));
      }
      if (StoreApplyObserver* observer =
              observer_.load(std::memory_order_acquire)) {
        observer->OnDelete(surface->name, victim_key.substr(2));
      }
    }
    users.erase(victim);
    AccountTable(shard);
    evicted_users_.fetch_add(1, std::memory_order_relaxed);
    evicted_bytes_.fetch_add(static_cast<uint64_t>(bytes),
                             std::memory_order_relaxed);
  }
}

void ShardedFilterStore::RemoveExposed(const Surface& surface,
                                       absl::string_view user_id,
                                       absl::Span<const uint64_t> item_hashes,
                                       uint8_t* keep) const {
  const int64_t now = clock_->NowMs();
  const std::string key = MakeKey(surface.id, user_id);
  Shard& shard = ShardFor(user_id);
  ReaderLock lock(&shard.mu);
  auto it = shard.users.find(key);
  if (it == shard.users.end()) return;
  it->filter.Touch(clock_->MonotonicMs());
  it->filter.RemoveExposed(surface.policy, now, item_hashes, keep);
}

FilterPull ShardedFilterStore::GetFilter(const Surface* surface,
                                         const FilterPolicy& policy,
                                         absl::string_view user_id,
                                         absl::string_view if_version) const {
  Shard& shard = ShardFor(user_id);
  ReaderLock lock(&shard.mu);
  return PullLocked(shard, surface, policy, user_id, if_version);
}

void ShardedFilterStore::PullUnderLock(const Surface* surface,
                                       const FilterPolicy& policy,
                                       absl::string_view user_id,
                                       absl::string_view if_version,
                                       PullConsumer under_lock) const {
  Shard& shard = ShardFor(user_id);
  ReaderLock lock(&shard.mu);
  FilterPull pull = PullLocked(shard, surface, policy, user_id, if_version);
  under_lock(pull);
}

FilterPull ShardedFilterStore::PullLocked(const Shard& shard,
                                          const Surface* surface,
                                          const FilterPolicy& policy,
                                          absl::string_view user_id,
                                          absl::string_view if_version) const {
  const int64_t now = clock_->NowMs();
  FilterPull pull;
  pull.now_ms = now;
  const UserFilter* filter = nullptr;
  if (surface != nullptr) {
    auto it = shard.users.find(MakeKey(surface->id, user_id));
    if (it != shard.users.end()) {
      it->filter.Touch(clock_->MonotonicMs());
      filter = &it->filter;
    }
  }
  if (!if_version.empty()) {
    pull.version = FilterVersionString(FilterFingerprint(filter, policy, now));
    if (pull.version == if_version) {
      pull.not_modified = true;
      return pull;
    }
  }
  pull.version =
      FilterVersionString(EncodeFilter(filter, policy, now, &pull.bytes));
  return pull;
}

std::optional<UserFilterStats> ShardedFilterStore::GetUserStats(
    const Surface& surface, absl::string_view user_id) const {
  const int64_t now = clock_->NowMs();
  const std::string key = MakeKey(surface.id, user_id);
  Shard& shard = ShardFor(user_id);
  ReaderLock lock(&shard.mu);
  auto it = shard.users.find(key);
  if (it == shard.users.end() ||
      !it->filter.HasLiveSlices(surface.policy, now)) {
    return std::nullopt;
  }
  UserFilterStats stats = it->filter.Stats(surface.policy, now);
  CountRunsAndBloomSegments(it->filter, surface.policy, now, &stats);
  stats.bytes += EntryOverheadBytes();
  return stats;
}

std::optional<UserExplanation> ShardedFilterStore::Explain(
    const Surface& surface, absl::string_view user_id,
    absl::Span<const uint64_t> item_hashes) const {
  const int64_t now = clock_->NowMs();
  const std::string key = MakeKey(surface.id, user_id);
  Shard& shard = ShardFor(user_id);
  ReaderLock lock(&shard.mu);
  auto it = shard.users.find(key);
  if (it == shard.users.end() ||
      !it->filter.HasLiveSlices(surface.policy, now)) {
    return std::nullopt;
  }
  UserExplanation out;
  out.stats = it->filter.Stats(surface.policy, now);
  out.stats.bytes += EntryOverheadBytes();
  out.claiming_slices.resize(item_hashes.size());
  for (size_t i = 0; i < item_hashes.size(); ++i) {
    it->filter.ClaimingSlices(surface.policy, now, item_hashes[i],
                              &out.claiming_slices[i]);
  }
  return out;
}

bool ShardedFilterStore::DeleteUser(const Surface& surface,
                                    absl::string_view user_id) {
  const std::string key = MakeKey(surface.id, user_id);
  Shard& shard = ShardFor(user_id);
  StoreApplyObserver* const observer =
      observer_.load(std::memory_order_acquire);
  bool had_live = false;
  {
    WriterLock lock(&shard.mu);
    auto it = shard.users.find(key);
    if (it == shard.users.end()) return false;
    had_live = it->filter.HasLiveSlices(surface.policy, clock_->NowMs());
    Account(shard, surface.id, -1, -EntryBytes(it->filter));
    shard.users.erase(it);
    AccountTable(shard);
    if (StoreJournal* journal = journal_.load(std::memory_order_acquire)) {
      journal->OnDelete(surface.name, user_id);
    }
    if (observer != nullptr) observer->OnDelete(surface.name, user_id);
  }
  if (observer != nullptr) observer->OnWritesReleased();
  return had_live;
}

uint64_t ShardedFilterStore::DropExpired(SweepReport* report) {
  uint64_t removed = 0;
  if (report != nullptr) *report = SweepReport();
  // One shard at a time: readers of other shards never wait on the sweep.
  for (Shard& shard : shards_) {
    const int64_t now = clock_->NowMs();
    const int64_t active_now = clock_->MonotonicMs();  // Touch's clock
    WriterLock lock(&shard.mu);
    for (auto it = shard.users.begin(); it != shard.users.end();) {
      UserFilter& filter = it->filter;
      const uint16_t surface_id = SurfaceIdOfKey(filter.key());
      const Surface* surface = surfaces_->ById(surface_id);
      const int64_t before = EntryBytes(filter);
      if (surface == nullptr || filter.DropExpired(surface->policy, now) == 0) {
        // An idle user's open slices are re-encoded at their share (memory
        // only; F stays within delta): UserFilter::SealIdle.
        if (surface != nullptr &&
            filter.SealIdle(surface->policy, now, active_now)) {
          Account(shard, surface_id, 0, EntryBytes(filter) - before);
        }
        if (report != nullptr && surface != nullptr) {
          Observe(*surface, filter, now, report);
        }
        ++it;
        continue;
      }
      if (report != nullptr && !filter.empty()) {
        Observe(*surface, filter, now, report);
      }
      if (filter.empty()) {
        Account(shard, surface_id, -1, -before);
        shard.users.erase(it++);
        AccountTable(shard);
        ++removed;
      } else {
        filter.SealIdle(surface->policy, now, active_now);
        Account(shard, surface_id, 0, EntryBytes(filter) - before);
        ++it;
      }
    }
  }
  if (report != nullptr) report->users_removed = removed;
  return removed;
}

void ShardedFilterStore::SetJournal(StoreJournal* journal) {
  journal_.store(journal, std::memory_order_release);
}

void ShardedFilterStore::SetApplyObserver(StoreApplyObserver* observer) {
  observer_.store(observer, std::memory_order_release);
}

void ShardedFilterStore::VisitShard(int shard_index, UserVisitor visit) const {
  const Shard& shard = shards_[shard_index];
  ReaderLock lock(&shard.mu);
  for (const StoredUser& user : shard.users) {
    const absl::string_view key = user.filter.key();
    const Surface* surface = surfaces_->ById(SurfaceIdOfKey(key));
    if (surface == nullptr) continue;  // cannot happen: keys come from surfaces
    visit(*surface, key.substr(2), user.filter);
  }
}

void ShardedFilterStore::LoadUser(const Surface& surface,
                                  absl::string_view user_id,
                                  UserFilter filter) {
  const std::string key = MakeKey(surface.id, user_id);
  // The decoded filter carries the key from now on (its allocation is
  // rebuilt once, here, outside the lock).
  filter.SetKey(key);
  Shard& shard = ShardFor(user_id);
  WriterLock lock(&shard.mu);
  auto it = shard.users.find(key);
  const bool inserted = it == shard.users.end();
  const int64_t before = inserted ? 0 : EntryBytes(it->filter);
  if (inserted) {
    it = shard.users.insert(StoredUser{std::move(filter)}).first;
  } else {
    it->filter = std::move(filter);
  }
  it->filter.Touch(clock_->MonotonicMs());
  Account(shard, surface.id, inserted ? 1 : 0, EntryBytes(it->filter) - before);
  if (inserted) AccountTable(shard);
}

void ShardedFilterStore::Clear() {
  for (Shard& shard : shards_) {
    WriterLock lock(&shard.mu);
    total_bytes_.fetch_sub(static_cast<int64_t>(shard.bytes),
                           std::memory_order_relaxed);
    shard.users.clear();
    shard.surface_usage.clear();
    shard.bytes = 0;
    AccountTable(shard);
  }
}

StoreUsage ShardedFilterStore::Usage(size_t num_surfaces) const {
  StoreUsage usage;
  usage.surfaces.resize(num_surfaces);
  for (const Shard& shard : shards_) {
    ReaderLock lock(&shard.mu);
    ShardUsage su{shard.users.size(), shard.bytes};
    usage.shards.push_back(su);
    usage.users += su.users;
    usage.bytes += su.bytes;
    usage.table_slack_bytes += static_cast<uint64_t>(shard.table_slack_bytes);
    for (size_t i = 0; i < shard.surface_usage.size() && i < num_surfaces;
         ++i) {
      usage.surfaces[i].users += shard.surface_usage[i].users;
      usage.surfaces[i].bytes += shard.surface_usage[i].bytes;
    }
  }
  return usage;
}

}  // namespace exposure_filter
