#include "exposure_filter/routing_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "exposure_filter/owner_hint.h"
#include "exposure_filter/partitioning.h"

namespace exposure_filter {

std::vector<std::string> StatefulSetReplicaAddresses(
    absl::string_view statefulset, absl::string_view service, int port,
    int replicas, absl::string_view kubernetes_namespace) {
  std::vector<std::string> addresses;
  addresses.reserve(replicas > 0 ? replicas : 0);
  for (int i = 0; i < replicas; ++i) {
    addresses.push_back(absl::StrCat(statefulset, "-", i, ".", service,
                                     kubernetes_namespace.empty() ? "" : ".",
                                     kubernetes_namespace, ":", port));
  }
  return addresses;
}

absl::Status RoutedRecordResult::status() const {
  for (const OwnerWrite& w : owners) {
    if (!w.status.ok()) return w.status;
  }
  return absl::OkStatus();
}

std::vector<int> RoutedRecordResult::FailedExposures() const {
  std::vector<int> failed;
  for (const OwnerWrite& w : owners) {
    if (!w.status.ok()) {
      failed.insert(failed.end(), w.exposures.begin(), w.exposures.end());
    }
  }
  return failed;
}

absl::StatusOr<std::unique_ptr<RoutingClient>> RoutingClient::Connect(
    const RoutingOptions& options,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  std::vector<std::unique_ptr<ExposureFilterClient>> clients;
  for (size_t i = 0; i < options.replica_addresses.size(); ++i) {
    absl::StatusOr<std::unique_ptr<ExposureFilterClient>> c =
        ExposureFilterClient::Connect(options.replica_addresses[i], credentials,
                                      options.client);
    if (!c.ok()) {
      return absl::Status(
          c.status().code(),
          absl::StrCat("replica_addresses[", i, "]: ", c.status().message()));
    }
    clients.push_back(*std::move(c));
  }
  return Create(options.partitions, std::move(clients));
}

absl::StatusOr<std::unique_ptr<RoutingClient>> RoutingClient::Create(
    int32_t partitions,
    std::vector<std::unique_ptr<ExposureFilterClient>> replicas) {
  if (partitions < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partitions: must be the topic's partition count (>= 1), got ",
        partitions));
  }
  if (replicas.empty()) {
    return absl::InvalidArgumentError("replica_addresses: empty");
  }
  // The servers refuse N > P too (a replica would own nothing).
  if (replicas.size() > static_cast<size_t>(partitions)) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica_addresses: ", replicas.size(),
                     " replicas exceed partitions=", partitions));
  }
  return std::unique_ptr<RoutingClient>(
      new RoutingClient(partitions, std::move(replicas)));
}

int32_t RoutingClient::ReplicaForUser(absl::string_view user_id) const {
  return exposure_filter::ReplicaForUser({user_id.data(), user_id.size()},
                                         partitions_, replicas());
}

absl::Status RoutingClient::Diagnose(int32_t replica,
                                     absl::Status status) const {
  if (status.code() != absl::StatusCode::kFailedPrecondition) return status;
  const std::optional<OwnerHint> hint = OwnerHint::FromStatus(status);
  if (!hint.has_value()) return status;
  std::string why;
  if (hint->partitions != partitions_ || hint->replicas != replicas()) {
    why = absl::StrCat(
        "routing misconfigured: this client routes with "
        "partitions=",
        partitions_, " replicas=", replicas(),
        " but the server at replica_addresses[", replica,
        "] runs --partitions=", hint->partitions,
        " --replicas=", hint->replicas,
        "; make them agree (docs/scale-out.md)");
  } else if (hint->self != replica) {
    why = absl::StrCat("routing misconfigured: replica_addresses[", replica,
                       "] reaches replica ", hint->self,
                       "; list the addresses in ordinal order");
  } else {
    // Same P and N, right replica, yet not its user: the two sides compute
    // different partitions, which is a bug, never a configuration.
    why = absl::StrCat("routing disagreement with replica ", replica,
                       " on the owner of a user (partitioner mismatch?)");
  }
  absl::Status diagnosed(status.code(),
                         absl::StrCat(why, ": ", status.message()));
  diagnosed.SetPayload(kOwnerHintPayloadUrl, absl::Cord(hint->Encode()));
  return diagnosed;
}

RoutedRecordResult RoutingClient::RecordExposure(
    const exposure::v1::RecordExposureRequest& request) const {
  // Bucket the exposures by owner, keeping their order within each owner.
  std::vector<std::vector<int>> by_owner(clients_.size());
  for (int i = 0; i < request.exposures_size(); ++i) {
    by_owner[ReplicaForUser(request.exposures(i).user_id())].push_back(i);
  }
  RoutedRecordResult result;
  for (size_t r = 0; r < by_owner.size(); ++r) {
    if (by_owner[r].empty()) continue;
    OwnerWrite& w = result.owners.emplace_back();
    w.replica = static_cast<int32_t>(r);
    w.exposures = std::move(by_owner[r]);
    exposure::v1::RecordExposureRequest part;
    part.set_surface(request.surface());
    part.mutable_exposures()->Reserve(static_cast<int>(w.exposures.size()));
    for (int i : w.exposures) *part.add_exposures() = request.exposures(i);
    absl::StatusOr<exposure::v1::RecordExposureResponse> resp =
        clients_[r]->RecordExposure(part);
    if (!resp.ok()) {
      absl::Status s = Diagnose(w.replica, resp.status());
      w.status = absl::Status(
          s.code(), absl::StrCat("replica ", r, " (", w.exposures.size(),
                                 " exposures not written): ", s.message()));
      if (auto hint = s.GetPayload(kOwnerHintPayloadUrl)) {
        w.status.SetPayload(kOwnerHintPayloadUrl, *hint);
      }
      continue;
    }
    w.response = *std::move(resp);
    result.items_recorded += w.response.items_recorded();
    result.items_expired += w.response.items_expired();
  }
  return result;
}

namespace {

template <typename Response>
absl::StatusOr<Response> Routed(const RoutingClient& router, int32_t replica,
                                absl::StatusOr<Response> response) {
  if (response.ok()) return response;
  return router.Diagnose(replica, response.status());
}

}  // namespace

absl::StatusOr<exposure::v1::FilterRecalledResponse>
RoutingClient::FilterRecalled(
    const exposure::v1::FilterRecalledRequest& request) const {
  const int32_t r = ReplicaForUser(request.user_id());
  return Routed(*this, r, clients_[r]->FilterRecalled(request));
}

absl::StatusOr<exposure::v1::GetFilterResponse> RoutingClient::GetFilter(
    const exposure::v1::GetFilterRequest& request) const {
  const int32_t r = ReplicaForUser(request.user_id());
  return Routed(*this, r, clients_[r]->GetFilter(request));
}

absl::StatusOr<exposure::v1::GetUserStatsResponse> RoutingClient::GetUserStats(
    const exposure::v1::GetUserStatsRequest& request) const {
  const int32_t r = ReplicaForUser(request.user_id());
  return Routed(*this, r, clients_[r]->GetUserStats(request));
}

absl::StatusOr<exposure::v1::DeleteUserResponse> RoutingClient::DeleteUser(
    const exposure::v1::DeleteUserRequest& request) const {
  const int32_t r = ReplicaForUser(request.user_id());
  return Routed(*this, r, clients_[r]->DeleteUser(request));
}

absl::StatusOr<exposure::v1::ExplainResponse> RoutingClient::Explain(
    const exposure::v1::ExplainRequest& request) const {
  const int32_t r = ReplicaForUser(request.user_id());
  return Routed(*this, r, clients_[r]->Explain(request));
}

absl::StatusOr<std::vector<exposure::v1::GetServerStatsResponse>>
RoutingClient::GetServerStats() const {
  std::vector<exposure::v1::GetServerStatsResponse> all;
  for (size_t r = 0; r < clients_.size(); ++r) {
    absl::StatusOr<exposure::v1::GetServerStatsResponse> s =
        clients_[r]->GetServerStats({});
    if (!s.ok()) {
      return absl::Status(
          s.status().code(),
          absl::StrCat("replica ", r, ": ", s.status().message()));
    }
    all.push_back(*std::move(s));
  }
  return all;
}

RoutingFilterCache::RoutingFilterCache(const RoutingClient* router,
                                       const FilterCacheOptions& options)
    : router_(router) {
  for (int32_t r = 0; r < router->replicas(); ++r) {
    caches_.push_back(
        std::make_unique<FilterCache>(&router->ClientForReplica(r), options));
  }
}

absl::StatusOr<std::shared_ptr<const PulledFilter>> RoutingFilterCache::Get(
    absl::string_view surface, absl::string_view user_id) {
  const int32_t r = router_->ReplicaForUser(user_id);
  absl::StatusOr<std::shared_ptr<const PulledFilter>> f =
      caches_[r]->Get(surface, user_id);
  if (f.ok()) return f;
  return router_->Diagnose(r, f.status());
}

void RoutingFilterCache::Invalidate(absl::string_view surface,
                                    absl::string_view user_id) {
  caches_[router_->ReplicaForUser(user_id)]->Invalidate(surface, user_id);
}

FilterCacheStats RoutingFilterCache::stats() const {
  FilterCacheStats total;
  for (const auto& c : caches_) {
    const FilterCacheStats s = c->stats();
    total.full_pulls += s.full_pulls;
    total.not_modified += s.not_modified;
    total.errors += s.errors;
  }
  return total;
}

}  // namespace exposure_filter
