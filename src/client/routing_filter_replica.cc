// RoutingFilterReplica (include/exposure_filter/routing_filter_replica.h):
// which owner's replica answers a user, moving its copy on failover, and
// mode A through the RoutingClient.
#include "exposure_filter/routing_filter_replica.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "exposure_filter/filter_cache.h"
#include "src/base/monotonic_time.h"

namespace exposure_filter {
namespace {

// Users whose applied write is remembered one by one; past it the map is
// cleared, which sends those users through mode A once more (stricter,
// never weaker), as ReadYourWritesOptions::max_users bounds the tokens.
constexpr size_t kMaxConfirmed = 100000;

std::string UserKey(absl::string_view surface, absl::string_view user) {
  return absl::StrCat(surface.size(), ":", surface, user);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RoutingFilterReplica>>
RoutingFilterReplica::Create(const RoutingClient* router,
                             const FilterReplicaOptions& options) {
  FilterReplicaOptions o = options;
  o.ping_when_idle = true;
  std::vector<std::unique_ptr<FilterReplica>> replicas;
  for (int32_t r = 0; r < router->replicas(); ++r) {
    absl::StatusOr<std::unique_ptr<FilterReplica>> replica =
        FilterReplica::Connect(router->ClientForReplica(r).channel(), o);
    if (!replica.ok()) return replica.status();
    replicas.push_back(*std::move(replica));
  }
  return std::unique_ptr<RoutingFilterReplica>(
      new RoutingFilterReplica(router, std::move(replicas)));
}

RoutingFilterReplica::RoutingFilterReplica(
    const RoutingClient* router,
    std::vector<std::unique_ptr<FilterReplica>> replicas)
    : router_(router), replicas_(std::move(replicas)) {}

RoutingFilterReplica::~RoutingFilterReplica() = default;

absl::Status RoutingFilterReplica::Check(absl::string_view surface,
                                         absl::string_view user_id,
                                         absl::Span<const uint64_t> ids,
                                         absl::Span<const std::string> keys,
                                         uint8_t* keep, CheckPath* path,
                                         int32_t* served_by) {
  const std::vector<int32_t> owners = router_->OwnersForUser(user_id);
  int32_t chosen = -1;
  for (int32_t o : owners) {
    if (replicas_[o]->Serving()) {
      chosen = o;
      break;
    }
  }
  std::optional<std::pair<int32_t, int64_t>> written =
      router_->WrittenOffset(user_id);
  if (chosen < 0) {
    // No stream to any owner serves: the copies held stay where they are
    // (a restarted owner takes its users back with their versions).
    no_owner_.fetch_add(1, std::memory_order_relaxed);
  } else {
    // The user's copies held by its other owners move here: their
    // subscriptions end, and the snapshot's version is offered to the
    // chosen owner. Checks that find them gone cost a lookup per owner.
    std::shared_ptr<const PulledFilter> seed;
    for (int32_t o : owners) {
      if (o == chosen) continue;
      std::shared_ptr<const PulledFilter> held =
          replicas_[o]->Release(surface, user_id);
      if (held != nullptr && seed == nullptr) seed = std::move(held);
    }
    if (seed != nullptr) moves_.fetch_add(1, std::memory_order_relaxed);
    absl::Time fresh_since = absl::InfinitePast();
    if (written.has_value()) {
      absl::MutexLock lock(&mu_);
      auto it = confirmed_.find(UserKey(surface, user_id));
      if (it != confirmed_.end() && it->second.replica == chosen &&
          it->second.offset >= written->second) {
        fresh_since = it->second.at;
      } else {
        // Not known applied on this owner: still (re)subscribe here, so
        // the copy is ready once it is.
        fresh_since = absl::InfiniteFuture();
        unconfirmed_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (replicas_[chosen]->CheckLocal(surface, user_id, ids, keys, keep,
                                      fresh_since, std::move(seed))) {
      local_.fetch_add(1, std::memory_order_relaxed);
      if (path != nullptr) *path = CheckPath::kLocal;
      if (served_by != nullptr) *served_by = chosen;
      return absl::OkStatus();
    }
  }
  absl::Status s =
      RoutedCheck(surface, user_id, ids, keys, keep,
                  written.has_value() ? written->second : -1, served_by);
  if (!s.ok()) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  routed_.fetch_add(1, std::memory_order_relaxed);
  if (path != nullptr) *path = CheckPath::kUnary;
  return s;
}

absl::Status RoutingFilterReplica::RoutedCheck(
    absl::string_view surface, absl::string_view user_id,
    absl::Span<const uint64_t> ids, absl::Span<const std::string> keys,
    uint8_t* keep, int64_t written_offset, int32_t* served_by) {
  exposure::v1::FilterRecalledRequest req;
  req.set_surface(std::string(surface));
  req.set_user_id(std::string(user_id));
  req.set_mode(exposure::v1::KEEP_MASK);
  req.mutable_candidate_ids()->Add(ids.begin(), ids.end());
  for (const std::string& k : keys) req.add_candidate_keys(k);
  int32_t answered_by = -1;
  // The router adds this client's write offset (read-your-writes) as
  // min_offsets: at least `written_offset`, read before.
  absl::StatusOr<exposure::v1::FilterRecalledResponse> resp =
      router_->FilterRecalled(req, &answered_by);
  if (!resp.ok()) return resp.status();
  if (served_by != nullptr) *served_by = answered_by;
  if (written_offset >= 0 && answered_by >= 0) {
    // The copy that answered had applied the write, and its push was
    // queued before this answer was sent: a ping sent from now on is
    // answered behind it.
    const Confirmed c{written_offset, answered_by, MonotonicTime()};
    absl::MutexLock lock(&mu_);
    if (confirmed_.size() >= kMaxConfirmed) confirmed_.clear();
    confirmed_.insert_or_assign(UserKey(surface, user_id), c);
  }
  const size_t n = ids.size() + keys.size();
  const std::string& mask = resp->keep_mask();
  if (mask.size() != (n + 7) / 8) {
    return absl::InternalError(absl::StrCat("keep_mask of ", mask.size(),
                                            " bytes for ", n, " candidates"));
  }
  for (size_t i = 0; i < n; ++i) {
    keep[i] = (static_cast<unsigned char>(mask[i / 8]) >> (i % 8)) & 1;
  }
  return absl::OkStatus();
}

void RoutingFilterReplica::Forget(absl::string_view surface,
                                  absl::string_view user_id) {
  for (const auto& r : replicas_) r->Forget(surface, user_id);
}

RoutingReplicaStats RoutingFilterReplica::stats() const {
  RoutingReplicaStats s;
  s.local_checks = local_.load();
  s.routed_checks = routed_.load();
  s.failed_checks = failed_.load();
  s.moves = moves_.load();
  s.unconfirmed_writes = unconfirmed_.load();
  s.no_owner_serving = no_owner_.load();
  for (const auto& r : replicas_) s.replicas.push_back(r->stats());
  return s;
}

}  // namespace exposure_filter
