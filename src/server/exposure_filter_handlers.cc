#include "src/server/exposure_filter_handlers.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exposure_filter/filter_format.h"
#include "exposure_filter/item_hash.h"
#include "google/protobuf/repeated_field.h"
#include "src/filter/item_hash_batch.h"
#include "src/server/request_validation.h"

namespace exposure_filter {
namespace {

using exposure::v1::Exposure;

// Hashes keys into out[first..].
void HashKeys(size_t first,
              const google::protobuf::RepeatedPtrField<std::string>& keys,
              uint64_t* out) {
  uint64_t* key_hashes = out + first;
  for (const std::string& key : keys) *key_hashes++ = HashItemKey(key);
}

// Hashes the ids, then the keys, into out[0 .. ids.size() + keys.size()).
void HashItems(const google::protobuf::RepeatedField<uint64_t>& ids,
               const google::protobuf::RepeatedPtrField<std::string>& keys,
               uint64_t* out) {
  HashItemIds(ids.data(), ids.size(), out);
  HashKeys(ids.size(), keys, out);
}

// Packs keep[0..n) (each 0 or 1) into the KEEP_MASK bytes, bit i % 8 of
// byte i / 8, and returns how many are 0.
size_t PackKeepMask(const uint8_t* keep, size_t n, std::string* mask) {
  mask->resize((n + 7) / 8);
  char* out = mask->data();
  size_t kept = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t bytes;
    std::memcpy(&bytes, keep + i, 8);  // little-endian: keep[i] is byte 0
    // Byte j (0 or 1) of `bytes` lands on bit 56 + j of the product, and no
    // other partial product reaches bits 56..63 (every byte pattern is
    // checked by KeepMaskAgreesWithKeptIdsForEveryBytePattern).
    out[i / 8] = static_cast<char>((bytes * 0x0102040810204080ull) >> 56);
    // Likewise the top byte of bytes * 0x0101..01 is the sum of the 8 flags
    // (at most 8, no carry out), without the popcount instruction baseline
    // x86-64 lacks.
    kept += static_cast<size_t>((bytes * 0x0101010101010101ull) >> 56);
  }
  if (i < n) {
    uint8_t packed = 0;
    for (size_t j = i; j < n; ++j) {
      packed = static_cast<uint8_t>(packed | (keep[j] << (j - i)));
      kept += keep[j];
    }
    out[i / 8] = static_cast<char>(packed);
  }
  return n - kept;
}

// Appends to `kept` the ids whose keep flag is set, in order, and returns
// how many. Without a branch per id: every id is written and the cursor
// advances by its flag. Which candidates were already exposed is random, so
// an `if (keep[i])` mispredicted about half the time (BM_FilterRecalledHandler
// KEPT_IDS 66 vs 46 us once its candidates stopped alternating).
size_t CompactKept(const uint64_t* ids, const uint8_t* keep, size_t n,
                   google::protobuf::RepeatedField<uint64_t>* kept) {
  const int before = kept->size();
  kept->Resize(before + static_cast<int>(n), 0);
  uint64_t* out = kept->mutable_data() + before;
  size_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    out[m] = ids[i];
    m += keep[i] != 0;
  }
  kept->Truncate(before + static_cast<int>(m));
  return m;
}

// Per-thread scratch for FilterRecalled: a 5,000-candidate request needs
// 40 KB of hashes and 5 KB of flags, on every call, on gRPC's few callback
// threads. Buffers grown past this many candidates are released after use
// so a rare huge request does not pin its memory.
constexpr size_t kScratchKeepCandidates = 1 << 16;
struct FilterScratch {
  std::vector<uint64_t> hashes;
  std::vector<uint8_t> keep;
  void Trim() {
    if (hashes.capacity() > kScratchKeepCandidates) {
      std::vector<uint64_t>().swap(hashes);
      std::vector<uint8_t>().swap(keep);
    }
  }
};

// Exposure lag bounds in ms, 100 ms .. 7 days: seconds are healthy,
// minutes mean a backlog, hours or days a replay or a stuck producer.
std::vector<uint64_t> LagBoundsMs() {
  std::vector<uint64_t> ms;
  for (double s :
       {0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
        1800.0, 3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0}) {
    ms.push_back(static_cast<uint64_t>(s * 1000));
  }
  return ms;
}

}  // namespace

ExposureFilterHandlers::ExposureFilterHandlers(SurfaceRegistry* surfaces,
                                               ShardedFilterStore* store,
                                               const RequestLimits& limits,
                                               TraceLog* trace_log)
    : surfaces_(surfaces),
      store_(store),
      limits_(limits),
      owned_trace_log_(trace_log == nullptr
                           ? std::make_unique<TraceLog>(TraceLimits{})
                           : nullptr),
      trace_log_(trace_log == nullptr ? owned_trace_log_.get() : trace_log),
      started_monotonic_ms_(store->clock().MonotonicMs()),
      exposure_lag_ms_(LagBoundsMs()) {}

ExposureFilterHandlers::Counters ExposureFilterHandlers::counters() const {
  Counters c;
  c.items_recorded = items_recorded_.load(std::memory_order_relaxed);
  c.items_expired = items_expired_.load(std::memory_order_relaxed);
  c.candidates_checked = candidates_checked_.load(std::memory_order_relaxed);
  c.candidates_removed = candidates_removed_.load(std::memory_order_relaxed);
  return c;
}

absl::Status ExposureFilterHandlers::CheckAvailable() const {
  if (available_.load(std::memory_order_acquire)) return absl::OkStatus();
  return absl::UnavailableError(
      "recovering: the server is loading its data_dir; retry shortly");
}

absl::Status ExposureFilterHandlers::CommitWrite() const {
  if (durability_ == nullptr) return absl::OkStatus();
  absl::Status s = durability_->Commit();
  if (s.ok()) return s;
  return absl::UnavailableError(absl::StrCat(
      "write-ahead log: ", s.message(),
      "; the write is not durable and was not acknowledged, retry later"));
}

absl::Status ExposureFilterHandlers::CheckWritable() const {
  if (durability_ == nullptr) return absl::OkStatus();
  absl::Status s = durability_->WriteStatus();
  if (s.ok()) return s;
  return absl::UnavailableError(absl::StrCat(
      "write-ahead log: ", s.message(),
      "; writes are refused until the data_dir takes writes again (reads "
      "still work), retry later"));
}

absl::Status ExposureFilterHandlers::RecordExposure(
    const exposure::v1::RecordExposureRequest& req,
    exposure::v1::RecordExposureResponse* resp) {
  return Record(WriteOrigin::kRpc, req, resp);
}

absl::Status ExposureFilterHandlers::RecordLoggedExposure(
    const exposure::v1::RecordExposureRequest& batch,
    exposure::v1::RecordExposureResponse* resp) {
  return Record(WriteOrigin::kLog, batch, resp);
}

absl::Status ExposureFilterHandlers::CheckRecordable(
    const exposure::v1::RecordExposureRequest& req, int64_t now) const {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  if (absl::Status s = ValidateRecordExposure(req, limits_, now); !s.ok()) {
    return s;
  }
  // All or nothing: a batch with another replica's user writes nothing, so
  // a routing client can resend it whole to the right owners.
  if (ownership_ != nullptr) {
    for (int i = 0; i < req.exposures_size(); ++i) {
      const std::string& user = req.exposures(i).user_id();
      if (ownership_->Owns(user)) continue;
      return ownership_->Check(absl::StrCat("exposures[", i, "].user_id"),
                               user);
    }
  }
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::Record(
    WriteOrigin origin, const exposure::v1::RecordExposureRequest& req,
    exposure::v1::RecordExposureResponse* resp) {
  const int64_t now = store_->clock().NowMs();
  if (absl::Status s = CheckRecordable(req, now); !s.ok()) return s;
  if (ownership_ != nullptr) {
    // Replicated: only a write taken from the Kafka log reaches
    // every copy; an RPC would write this copy alone (the gRPC edge sends
    // it through the log instead: RecordExposureThroughLog).
    if (origin == WriteOrigin::kRpc) {
      if (absl::Status s = ownership_->CheckDirectWrite("RecordExposure");
          !s.ok()) {
        return s;
      }
    }
  }
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  absl::StatusOr<const Surface*> surface =
      surfaces_->GetOrCreate(req.surface());
  if (!surface.ok()) return surface.status();
  // Hash everything first: the store then only takes locks to set bits.
  // One buffer for every exposure's hashes (a vector per exposure was 50
  // mallocs per 50-user call, slow in the store's fragmented heap), on the
  // stack as the batch's list and the lag bins are for the feed's calls (a
  // few users of 20 items): ~3 KiB of stack, no malloc.
  size_t total = 0;
  for (const Exposure& e : req.exposures()) {
    total += static_cast<size_t>(e.item_ids_size() + e.item_keys_size());
  }
  absl::InlinedVector<uint64_t, 256> hashes(total);
  absl::InlinedVector<UserExposures, 16> batch;
  batch.reserve(req.exposures_size());
  uint64_t* next_hash = hashes.data();
  // Lags are binned locally and merged once: one set of atomic adds per
  // request, not per user (LagBoundsMs: 18 bins).
  absl::InlinedVector<uint64_t, 24> lag_counts(exposure_lag_ms_.num_buckets());
  uint64_t lag_sum_ms = 0;
  bool lag_observed = false;
  for (int i = 0; i < req.exposures_size(); ++i) {
    const Exposure& e = req.exposures(i);
    const absl::Span<const uint64_t> item_hashes(
        next_hash, static_cast<size_t>(e.item_ids_size() + e.item_keys_size()));
    HashItems(e.item_ids(), e.item_keys(), next_hash);
    next_hash += item_hashes.size();
    batch.push_back(UserExposures{e.user_id(), item_hashes, e.event_time_ms()});
    if (e.event_time_ms() != 0 && !item_hashes.empty()) {
      const uint64_t lag = now > e.event_time_ms()
                               ? static_cast<uint64_t>(now - e.event_time_ms())
                               : 0;
      ++lag_counts[exposure_lag_ms_.Bucket(lag)];
      lag_sum_ms += lag;
      lag_observed = true;
    }
  }
  if (lag_observed) exposure_lag_ms_.Merge(lag_counts, lag_sum_ms);
  const RecordCounts counts = store_->Record(**surface, batch);
  // Traced users' entries mirror what the store now holds, committed or not.
  if (trace_log_->size() > 0) TraceExposures(req, **surface, now);
  // The store logged each change as it applied it; answer only once the log
  // holds them (group commit: concurrent RPCs share the write).
  if (absl::Status s = CommitWrite(); !s.ok()) return s;
  items_recorded_.fetch_add(counts.recorded, std::memory_order_relaxed);
  items_expired_.fetch_add(counts.expired, std::memory_order_relaxed);
  resp->set_items_recorded(counts.recorded);
  resp->set_items_expired(counts.expired);
  return absl::OkStatus();
}

void ExposureFilterHandlers::TraceExposures(
    const exposure::v1::RecordExposureRequest& req, const Surface& surface,
    int64_t now_ms) {
  const FilterPolicy& policy = surface.policy;
  std::vector<std::vector<absl::string_view>> keys;
  std::vector<TracedExposure> traced;
  keys.reserve(req.exposures_size());
  for (const Exposure& e : req.exposures()) {
    if (!trace_log_->IsTraced(e.user_id())) continue;
    // The same event time and aging the store applied (see
    // ShardedFilterStore::Record): late-but-live events keep their time,
    // slightly-future ones are recorded now, expired ones were ignored.
    const int64_t event = e.event_time_ms() == 0
                              ? now_ms
                              : std::min<int64_t>(e.event_time_ms(), now_ms);
    if (policy.EventExpired(event, now_ms)) continue;
    std::vector<absl::string_view>& k = keys.emplace_back();
    k.assign(e.item_keys().begin(), e.item_keys().end());
    traced.push_back(TracedExposure{
        e.user_id(),
        absl::MakeConstSpan(e.item_ids().data(), e.item_ids_size()), k, event,
        policy.SliceEndMs(policy.SliceIndexOf(event)) + policy.retention_ms()});
  }
  trace_log_->Record(surface.name, traced);
}

absl::Status ExposureFilterHandlers::ResolveRead(
    absl::string_view surface_name, absl::string_view user_id,
    const Surface** surface) const {
  if (absl::Status s = SurfaceRegistry::ValidateName(surface_name); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateUserId("user_id", user_id, limits_); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckOwner("user_id", user_id); !s.ok()) return s;
  *surface = surfaces_->Find(surface_name);
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::FilterRecalled(
    const exposure::v1::FilterRecalledRequest& req,
    exposure::v1::FilterRecalledResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  if (absl::Status s = ValidateFilterRecalled(req, limits_); !s.ok()) return s;
  if (absl::Status s = ValidateMinOffsets(req.min_offsets()); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckOwner("user_id", req.user_id()); !s.ok()) return s;
  ReadAdmission admission;
  if (absl::Status s =
          CheckFresh(GatedRead::kFilterRecalled, req.user_id(),
                     req.min_offsets(), req.allow_lagging(), &admission);
      !s.ok()) {
    return s;
  }
  const Surface* surface = surfaces_->Find(req.surface());
  const size_t num_ids = req.candidate_ids_size();
  const size_t n = num_ids + req.candidate_keys_size();
  thread_local FilterScratch scratch;
  std::vector<uint8_t>& keep = scratch.keep;
  keep.assign(n, 1);
  if (surface != nullptr && n > 0) {
    // The reused buffer is only grown, never zero-filled per request.
    if (scratch.hashes.size() < n) scratch.hashes.resize(n);
    uint64_t* hashes = scratch.hashes.data();
    HashItemIds(req.candidate_ids().data(), num_ids, hashes);
    HashKeys(num_ids, req.candidate_keys(), hashes);
    store_->RemoveExposed(*surface, req.user_id(),
                          absl::MakeConstSpan(hashes, n), keep.data());
  }
  uint32_t removed = 0;
  if (req.mode() == exposure::v1::KEEP_MASK) {
    removed = static_cast<uint32_t>(
        PackKeepMask(keep.data(), n, resp->mutable_keep_mask()));
  } else {
    removed = static_cast<uint32_t>(
        num_ids - CompactKept(req.candidate_ids().data(), keep.data(), num_ids,
                              resp->mutable_kept_ids()));
    for (size_t i = num_ids; i < n; ++i) {
      if (keep[i]) {
        resp->add_kept_keys(req.candidate_keys(i - num_ids));
      } else {
        ++removed;
      }
    }
  }
  scratch.Trim();
  resp->set_removed_count(removed);
  ReportStaleness(GatedRead::kFilterRecalled, admission, resp);
  candidates_checked_.fetch_add(n, std::memory_order_relaxed);
  candidates_removed_.fetch_add(removed, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::CheckGetFilter(
    const exposure::v1::GetFilterRequest& req, const Surface** surface,
    ReadAdmission* admission) const {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  if (absl::Status s = ValidateMinOffsets(req.min_offsets()); !s.ok()) {
    return s;
  }
  if (absl::Status s = ResolveRead(req.surface(), req.user_id(), surface);
      !s.ok()) {
    return s;
  }
  if (req.if_version().size() > 64) {
    return absl::InvalidArgumentError(
        "if_version: longer than any version this server issues");
  }
  if (req.accepted_formats_size() > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("accepted_formats: ", req.accepted_formats_size(),
                     " entries, at most 16"));
  }
  if (absl::Status s =
          CheckFresh(GatedRead::kGetFilter, req.user_id(), req.min_offsets(),
                     req.allow_lagging(), admission);
      !s.ok()) {
    return s;
  }
  // A client that says which formats it reads and does not read ours gets
  // a clear refusal instead of bytes it would reject (or, worse, misread).
  if (req.accepted_formats_size() > 0 &&
      std::find(req.accepted_formats().begin(), req.accepted_formats().end(),
                format::kVersion) == req.accepted_formats().end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "accepted_formats: this server encodes filter format ",
        format::kVersion, "; the request accepts only ",
        absl::StrJoin(req.accepted_formats(), ", "),
        ". Upgrade the client's filter decoder (docs/filter-format.md) or "
        "use FilterRecalled"));
  }
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::GetFilter(
    const exposure::v1::GetFilterRequest& req,
    exposure::v1::GetFilterResponse* resp) {
  const Surface* surface = nullptr;
  ReadAdmission admission;
  if (absl::Status s = CheckGetFilter(req, &surface, &admission); !s.ok()) {
    return s;
  }
  FilterPull pull = store_->GetFilter(
      surface, surface ? surface->policy : surfaces_->PolicyFor(req.surface()),
      req.user_id(), req.if_version());
  resp->set_not_modified(pull.not_modified);
  resp->set_version(std::move(pull.version));
  *resp->mutable_filter() = std::move(pull.bytes);
  ReportStaleness(GatedRead::kGetFilter, admission, resp);
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::PullForSession(
    const exposure::v1::GetFilterRequest& req, SessionPullConsumer under_lock) {
  const Surface* surface = nullptr;
  // A subscription's request carries no allow_lagging: a session stream is
  // told of its copy's lag by pong.lagging instead.
  ReadAdmission admission;
  if (absl::Status s = CheckGetFilter(req, &surface, &admission); !s.ok()) {
    return s;
  }
  const FilterPolicy& policy =
      surface ? surface->policy : surfaces_->PolicyFor(req.surface());
  store_->PullUnderLock(surface, policy, req.user_id(), req.if_version(),
                        [&](FilterPull& pull) { under_lock(pull, policy); });
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::GetUserStats(
    const exposure::v1::GetUserStatsRequest& req,
    exposure::v1::GetUserStatsResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  if (absl::Status s = ValidateMinOffsets(req.min_offsets()); !s.ok()) {
    return s;
  }
  const Surface* surface = nullptr;
  if (absl::Status s = ResolveRead(req.surface(), req.user_id(), &surface);
      !s.ok()) {
    return s;
  }
  ReadAdmission admission;
  if (absl::Status s =
          CheckFresh(GatedRead::kGetUserStats, req.user_id(), req.min_offsets(),
                     req.allow_lagging(), &admission);
      !s.ok()) {
    return s;
  }
  ReportStaleness(GatedRead::kGetUserStats, admission, resp);
  if (surface == nullptr) return absl::OkStatus();
  std::optional<UserFilterStats> st =
      store_->GetUserStats(*surface, req.user_id());
  if (!st.has_value()) return absl::OkStatus();
  resp->set_exists(true);
  resp->set_items(st->items);
  resp->set_bytes(st->bytes);
  resp->set_slices(st->slices);
  resp->set_segments(st->segments);
  resp->set_runs(st->runs);
  resp->set_bloom_segments(st->bloom_segments);
  resp->set_estimated_fp_rate(st->estimated_fp_rate);
  resp->set_oldest_exposure_ms(st->oldest_exposure_ms);
  resp->set_newest_exposure_ms(st->newest_exposure_ms);
  resp->set_expires_at_ms(st->expires_at_ms);
  for (const SliceStats& ss : st->slice_stats) {
    exposure::v1::SliceStats* out = resp->add_slice_stats();
    out->set_start_ms(ss.start_ms);
    out->set_end_ms(ss.end_ms);
    out->set_items(ss.items);
    out->set_capacity(ss.capacity);
    out->set_bytes(ss.bytes);
    out->set_segments(ss.segments);
    out->set_runs(ss.runs);
    out->set_bloom_segments(ss.bloom_segments);
    out->set_estimated_fp_rate(ss.estimated_fp_rate);
  }
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::DeleteUser(
    const exposure::v1::DeleteUserRequest& req,
    exposure::v1::DeleteUserResponse* resp) {
  return DeleteUserFrom(WriteOrigin::kRpc, req, resp);
}

absl::Status ExposureFilterHandlers::DeleteLoggedUser(
    const exposure::v1::DeleteUserRequest& req,
    exposure::v1::DeleteUserResponse* resp) {
  return DeleteUserFrom(WriteOrigin::kLog, req, resp);
}

absl::Status ExposureFilterHandlers::DeleteUserFrom(
    WriteOrigin origin, const exposure::v1::DeleteUserRequest& req,
    exposure::v1::DeleteUserResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  const Surface* surface = nullptr;
  if (absl::Status s = ResolveRead(req.surface(), req.user_id(), &surface);
      !s.ok()) {
    return s;
  }
  if (ownership_ != nullptr && origin == WriteOrigin::kRpc) {
    if (absl::Status s = ownership_->CheckDirectWrite("DeleteUser"); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  resp->set_existed(surface != nullptr &&
                    store_->DeleteUser(*surface, req.user_id()));
  trace_log_->DropUserEntries(req.surface(), req.user_id());
  return CommitWrite();
}

absl::Status ExposureFilterHandlers::GetServerStats(
    const exposure::v1::GetServerStatsRequest& /*req*/,
    exposure::v1::GetServerStatsResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  const std::vector<const Surface*> surfaces = surfaces_->All();
  const StoreUsage usage = store_->Usage(surfaces.size());
  resp->set_users(usage.users);
  resp->set_bytes(usage.bytes);
  resp->set_shards(static_cast<uint32_t>(usage.shards.size()));
  for (size_t i = 0; i < usage.shards.size(); ++i) {
    exposure::v1::ShardStats* s = resp->add_shard_stats();
    s->set_shard(static_cast<uint32_t>(i));
    s->set_users(usage.shards[i].users);
    s->set_bytes(usage.shards[i].bytes);
  }
  for (const Surface* surface : surfaces) {
    exposure::v1::SurfaceStats* s = resp->add_surface_stats();
    s->set_surface(surface->name);
    s->set_users(usage.surfaces[surface->id].users);
    s->set_bytes(usage.surfaces[surface->id].bytes);
    s->set_false_positive_rate(surface->policy.fp_rate());
    s->set_retention_ms(surface->policy.retention_ms());
    s->set_slice_span_ms(surface->policy.slice_span_ms());
  }
  resp->set_items_recorded(items_recorded_.load(std::memory_order_relaxed));
  resp->set_items_expired(items_expired_.load(std::memory_order_relaxed));
  resp->set_candidates_checked(
      candidates_checked_.load(std::memory_order_relaxed));
  resp->set_candidates_removed(
      candidates_removed_.load(std::memory_order_relaxed));
  resp->set_uptime_ms(store_->clock().MonotonicMs() - started_monotonic_ms_);
  const EvictionCounts ev = store_->evictions();
  resp->set_memory_limit_bytes(store_->memory_limit());
  resp->set_users_evicted(ev.users);
  resp->set_bytes_evicted(ev.bytes);
  resp->set_table_slack_bytes(usage.table_slack_bytes);
  if (ownership_ != nullptr && ownership_->ownership().partitioned()) {
    const ClusterOptions& cluster = ownership_->ownership().options();
    resp->set_partitions(static_cast<uint32_t>(cluster.partitions));
    resp->set_replicas(static_cast<uint32_t>(cluster.replicas));
    resp->set_replica_ordinal(static_cast<uint32_t>(cluster.replica_ordinal));
    resp->set_replication_factor(
        static_cast<uint32_t>(cluster.replication_factor));
    for (int32_t p : ownership_->ownership().OwnedPartitions()) {
      resp->add_owned_partitions(static_cast<uint32_t>(p));
    }
    resp->set_unowned_users_dropped(
        unowned_users_dropped_.load(std::memory_order_relaxed));
  }
  if (durability_ != nullptr) {
    resp->set_durable(true);
    const absl::Status wal = durability_->WriteStatus();
    resp->set_wal_writable(wal.ok());
    resp->set_wal_error(std::string(wal.message()));
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter
