#include "src/server/exposure_filter_handlers.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure_filter/item_hash.h"
#include "src/server/request_validation.h"

namespace exposure_filter {
namespace {

using exposure::v1::Exposure;

void HashItems(const google::protobuf::RepeatedField<uint64_t>& ids,
               const google::protobuf::RepeatedPtrField<std::string>& keys,
               std::vector<uint64_t>* out) {
  out->clear();
  out->reserve(ids.size() + keys.size());
  for (uint64_t id : ids) out->push_back(HashItemId(id));
  for (const std::string& key : keys) out->push_back(HashItemKey(key));
}

}  // namespace

ExposureFilterHandlers::ExposureFilterHandlers(SurfaceRegistry* surfaces,
                                               ShardedFilterStore* store,
                                               const RequestLimits& limits)
    : surfaces_(surfaces),
      store_(store),
      limits_(limits),
      started_ms_(store->clock().NowMs()) {}

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

absl::Status ExposureFilterHandlers::RecordExposure(
    const exposure::v1::RecordExposureRequest& req,
    exposure::v1::RecordExposureResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  const int64_t now = store_->clock().NowMs();
  if (absl::Status s = ValidateRecordExposure(req, limits_, now); !s.ok()) {
    return s;
  }
  absl::StatusOr<const Surface*> surface = surfaces_->GetOrCreate(req.surface());
  if (!surface.ok()) return surface.status();
  // Hash everything first: the store then only takes locks to set bits.
  std::vector<std::vector<uint64_t>> hashes(req.exposures_size());
  std::vector<UserExposures> batch;
  batch.reserve(req.exposures_size());
  for (int i = 0; i < req.exposures_size(); ++i) {
    const Exposure& e = req.exposures(i);
    HashItems(e.item_ids(), e.item_keys(), &hashes[i]);
    batch.push_back(UserExposures{e.user_id(), hashes[i], e.event_time_ms()});
  }
  const RecordCounts counts = store_->Record(**surface, batch);
  // The store logged each change as it applied it; answer only once the log
  // holds them (group commit: concurrent RPCs share the write).
  if (absl::Status s = CommitWrite(); !s.ok()) return s;
  items_recorded_.fetch_add(counts.recorded, std::memory_order_relaxed);
  items_expired_.fetch_add(counts.expired, std::memory_order_relaxed);
  resp->set_items_recorded(counts.recorded);
  resp->set_items_expired(counts.expired);
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::ResolveRead(absl::string_view surface_name,
                                                 absl::string_view user_id,
                                                 const Surface** surface) const {
  if (absl::Status s = SurfaceRegistry::ValidateName(surface_name); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateUserId("user_id", user_id, limits_); !s.ok()) {
    return s;
  }
  *surface = surfaces_->Find(surface_name);
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::FilterRecalled(
    const exposure::v1::FilterRecalledRequest& req,
    exposure::v1::FilterRecalledResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  if (absl::Status s = ValidateFilterRecalled(req, limits_); !s.ok()) return s;
  const Surface* surface = surfaces_->Find(req.surface());
  const size_t num_ids = req.candidate_ids_size();
  const size_t n = num_ids + req.candidate_keys_size();
  std::vector<uint8_t> keep(n, 1);
  if (surface != nullptr && n > 0) {
    std::vector<uint64_t> hashes;
    HashItems(req.candidate_ids(), req.candidate_keys(), &hashes);
    store_->RemoveExposed(*surface, req.user_id(), hashes, keep.data());
  }
  uint32_t removed = 0;
  if (req.mode() == exposure::v1::KEEP_MASK) {
    std::string* mask = resp->mutable_keep_mask();
    mask->assign((n + 7) / 8, '\0');
    for (size_t i = 0; i < n; ++i) {
      if (keep[i]) {
        (*mask)[i / 8] = static_cast<char>((*mask)[i / 8] | (1 << (i % 8)));
      } else {
        ++removed;
      }
    }
  } else {
    for (size_t i = 0; i < num_ids; ++i) {
      if (keep[i]) {
        resp->add_kept_ids(req.candidate_ids(i));
      } else {
        ++removed;
      }
    }
    for (size_t i = num_ids; i < n; ++i) {
      if (keep[i]) {
        resp->add_kept_keys(req.candidate_keys(i - num_ids));
      } else {
        ++removed;
      }
    }
  }
  resp->set_removed_count(removed);
  candidates_checked_.fetch_add(n, std::memory_order_relaxed);
  candidates_removed_.fetch_add(removed, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::GetFilter(
    const exposure::v1::GetFilterRequest& req,
    exposure::v1::GetFilterResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  const Surface* surface = nullptr;
  if (absl::Status s = ResolveRead(req.surface(), req.user_id(), &surface);
      !s.ok()) {
    return s;
  }
  if (req.if_version().size() > 64) {
    return absl::InvalidArgumentError(
        "if_version: longer than any version this server issues");
  }
  FilterPull pull = store_->GetFilter(
      surface, surface ? surface->policy : surfaces_->PolicyFor(req.surface()),
      req.user_id(), req.if_version());
  resp->set_not_modified(pull.not_modified);
  resp->set_version(std::move(pull.version));
  *resp->mutable_filter() = std::move(pull.bytes);
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::GetUserStats(
    const exposure::v1::GetUserStatsRequest& req,
    exposure::v1::GetUserStatsResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  const Surface* surface = nullptr;
  if (absl::Status s = ResolveRead(req.surface(), req.user_id(), &surface);
      !s.ok()) {
    return s;
  }
  if (surface == nullptr) return absl::OkStatus();
  std::optional<UserFilterStats> st = store_->GetUserStats(*surface, req.user_id());
  if (!st.has_value()) return absl::OkStatus();
  resp->set_exists(true);
  resp->set_items(st->items);
  resp->set_bytes(st->bytes);
  resp->set_slices(st->slices);
  resp->set_segments(st->segments);
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
    out->set_estimated_fp_rate(ss.estimated_fp_rate);
  }
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::DeleteUser(
    const exposure::v1::DeleteUserRequest& req,
    exposure::v1::DeleteUserResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  const Surface* surface = nullptr;
  if (absl::Status s = ResolveRead(req.surface(), req.user_id(), &surface);
      !s.ok()) {
    return s;
  }
  resp->set_existed(surface != nullptr &&
                    store_->DeleteUser(*surface, req.user_id()));
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
  resp->set_uptime_ms(store_->clock().NowMs() - started_ms_);
  return absl::OkStatus();
}

}  // namespace exposure_filter
