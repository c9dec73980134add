#include "exposure_filter/routing_client.h"

#include <optional>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "exposure_filter/owner_hint.h"
#include "exposure_filter/partitioning.h"
#include "src/client/failover_call.h"
#include "src/client/read_your_writes_tokens.h"

namespace exposure_filter {
namespace {

// The callback-API methods the failover calls use; the stub's overloads
// (std::function or reactor) are told apart by the member pointer's type.
// (An elaborated name: the stub also has a member function async().)
using Async = class exposure::v1::ExposureFilter::Stub::async;
template <typename Request, typename Response>
using AsyncUnary = void (Async::*)(grpc::ClientContext*, const Request*,
                                   Response*,
                                   std::function<void(grpc::Status)>);
namespace v1 = exposure::v1;
constexpr AsyncUnary<v1::RecordExposureRequest, v1::RecordExposureResponse>
    kRecordExposure = &Async::RecordExposure;
constexpr AsyncUnary<v1::FilterRecalledRequest, v1::FilterRecalledResponse>
    kFilterRecalled = &Async::FilterRecalled;
constexpr AsyncUnary<v1::GetFilterRequest, v1::GetFilterResponse> kGetFilter =
    &Async::GetFilter;
constexpr AsyncUnary<v1::GetUserStatsRequest, v1::GetUserStatsResponse>
    kGetUserStats = &Async::GetUserStats;
constexpr AsyncUnary<v1::DeleteUserRequest, v1::DeleteUserResponse>
    kDeleteUser = &Async::DeleteUser;
constexpr AsyncUnary<v1::ExplainRequest, v1::ExplainResponse> kExplain =
    &Async::Explain;

// The reads a replicated server gates on its lag: they take allow_lagging
// and answer with their staleness.
template <typename Request>
constexpr bool kLagGatedRead =
    std::is_same_v<Request, v1::FilterRecalledRequest> ||
    std::is_same_v<Request, v1::GetFilterRequest> ||
    std::is_same_v<Request, v1::GetUserStatsRequest> ||
    std::is_same_v<Request, v1::ExplainRequest>;

// What a try sends: `request`, or on the last owner's try of a lag-gated
// read a copy carrying allow_lagging, made once into *last_try.
template <typename Request>
const Request* RequestForTry(
    const Request& request, [[maybe_unused]] bool last_owner,
    [[maybe_unused]] std::optional<Request>* last_try) {
  if constexpr (kLagGatedRead<Request>) {
    if (last_owner && !request.allow_lagging()) {
      if (!last_try->has_value()) {
        last_try->emplace(request);
        (*last_try)->set_allow_lagging(true);
      }
      return &**last_try;
    }
  }
  return &request;
}

}  // namespace

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
  return Create(options.partitions, std::move(clients),
                options.replication_factor, options.failover,
                options.read_your_writes);
}

absl::StatusOr<std::unique_ptr<RoutingClient>> RoutingClient::Create(
    int32_t partitions,
    std::vector<std::unique_ptr<ExposureFilterClient>> replicas,
    int32_t replication_factor, const FailoverOptions& failover,
    const ReadYourWritesOptions& read_your_writes) {
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
  if (replication_factor < 1 ||
      replication_factor > static_cast<int32_t>(replicas.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("replication_factor: must be 1..", replicas.size(),
                     " (the replicas), got ", replication_factor));
  }
  if (failover.per_try_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "failover.per_try_timeout: must be >= 0 (0: none)");
  }
  if (failover.hedge_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "failover.hedge_delay: must be >= 0 (0: no hedging)");
  }
  return std::unique_ptr<RoutingClient>(
      new RoutingClient(partitions, std::move(replicas), replication_factor,
                        failover, read_your_writes));
}

RoutingClient::RoutingClient(
    int32_t partitions,
    std::vector<std::unique_ptr<ExposureFilterClient>> clients,
    int32_t replication_factor, const FailoverOptions& failover,
    const ReadYourWritesOptions& read_your_writes)
    : partitions_(partitions),
      clients_(std::move(clients)),
      failover_(failover),
      replication_factor_(replication_factor),
      replica_errors_(new std::atomic<uint64_t>[clients_.size()]),
      tokens_(read_your_writes.enabled ? std::make_unique<ReadYourWritesTokens>(
                                             read_your_writes.max_users)
                                       : nullptr) {
  for (size_t r = 0; r < clients_.size(); ++r) replica_errors_[r] = 0;
}

RoutingClient::~RoutingClient() = default;

template <typename Request>
const Request& RoutingClient::WithToken(const Request& request,
                                        Request* with_token) const {
  if (tokens_ == nullptr || !request.min_offsets().empty()) return request;
  const int32_t p = KafkaPartitionForKey(
      {request.user_id().data(), request.user_id().size()}, partitions_);
  const std::optional<int64_t> offset = tokens_->Lookup(request.user_id(), p);
  if (!offset.has_value()) return request;
  *with_token = request;
  (*with_token->mutable_min_offsets())[p] = *offset;
  ++reads_with_offsets_;
  return *with_token;
}

void RoutingClient::RememberWrite(
    absl::string_view user_id,
    const google::protobuf::Map<int32_t, int64_t>& written_offsets) const {
  if (tokens_ == nullptr) return;
  const int32_t p =
      KafkaPartitionForKey({user_id.data(), user_id.size()}, partitions_);
  if (auto it = written_offsets.find(p); it != written_offsets.end()) {
    tokens_->Record(user_id, p, it->second);
  }
}

int32_t RoutingClient::ReplicaForUser(absl::string_view user_id) const {
  return exposure_filter::ReplicaForUser({user_id.data(), user_id.size()},
                                         partitions_, replicas());
}

std::vector<int32_t> RoutingClient::OwnersForUser(
    absl::string_view user_id) const {
  return OwnersOfUser({user_id.data(), user_id.size()}, partitions_, replicas(),
                      replication_factor_.load());
}

RoutingStats RoutingClient::stats() const {
  RoutingStats s;
  s.failovers = failovers_.load();
  s.hedges = hedges_.load();
  s.placement_updates = placement_updates_.load();
  s.reads_with_offsets = reads_with_offsets_.load();
  s.lagging_answers = lagging_answers_.load();
  for (size_t r = 0; r < clients_.size(); ++r) {
    s.replica_errors.push_back(replica_errors_[r].load());
  }
  return s;
}

std::vector<int32_t> RoutingClient::Replan(absl::string_view user_id,
                                           const absl::Status& status) const {
  const std::optional<OwnerHint> hint = OwnerHint::FromStatus(status);
  if (!hint.has_value() || hint->partitions != partitions_ ||
      hint->replicas != replicas() || hint->replication_factor < 1 ||
      hint->replication_factor > replicas()) {
    return {};  // no hint, or a misconfiguration Diagnose() explains
  }
  int32_t r = replication_factor_.load();
  if (hint->replication_factor == r) return {};
  // The cluster's R changed (or this client's was wrong): follow it.
  if (replication_factor_.compare_exchange_strong(r,
                                                  hint->replication_factor)) {
    ++placement_updates_;
  }
  return OwnersOfUser({user_id.data(), user_id.size()}, partitions_, replicas(),
                      hint->replication_factor);
}

template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> RoutingClient::Failover(absl::string_view user_id,
                                                 std::vector<int32_t> owners,
                                                 const Request& request,
                                                 Method method, bool hedge,
                                                 int32_t* answered_by) const {
  internal::FailoverPolicy policy;
  policy.deadline = clients_[0]->options().deadline;
  policy.per_try_timeout = failover_.per_try_timeout;
  policy.hedge_delay = hedge ? failover_.hedge_delay : absl::ZeroDuration();
  policy.last_resort_pass = kLagGatedRead<Request>;
  internal::FailoverEvents events;
  events.replica_error = [this](int32_t r) { ++replica_errors_[r]; };
  events.failover = [this] { ++failovers_; };
  events.hedge = [this] { ++hedges_; };
  events.replan = [this, user_id](const absl::Status& s) {
    return Replan(user_id, s);
  };
  events.diagnose = [this](int32_t r, absl::Status s) {
    return Diagnose(r, std::move(s));
  };
  // A read's try on the last owner carries allow_lagging: no owner is left
  // after it, and a lagging copy's answer, which says how stale it is,
  // beats a failed read. A hedge to it too: it is sent because the earlier
  // try is slow, and waiting for that is what hedging avoids. The copy is
  // made only when that try starts (a FilterRecalled of 5,000 candidates
  // is 40 KB), and lives until every try has finished.
  std::optional<Request> last_try;
  const internal::StartTry<Response> start =
      [this, &request, &last_try, method](
          int32_t r, bool last_owner, grpc::ClientContext* ctx,
          Response* response, std::function<void(grpc::Status)> done) {
        (clients_[r]->stub()->async()->*method)(
            ctx, RequestForTry(request, last_owner, &last_try), response,
            std::move(done));
      };
  absl::StatusOr<Response> resp = internal::RunWithFailover<Response>(
      std::move(owners), policy, start, events, answered_by);
  if constexpr (kLagGatedRead<Request>) {
    if (resp.ok() && resp->staleness().lagging()) ++lagging_answers_;
  }
  return resp;
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
  } else if (hint->replication_factor != replication_factor_.load()) {
    why = absl::StrCat(
        "routing misconfigured: this client routes with "
        "replication_factor=",
        replication_factor_.load(),
        " but the server at "
        "replica_addresses[",
        replica, "] runs --replication_factor=", hint->replication_factor);
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
    // Users sharing owner 0 = r share every owner: (r + i) mod N.
    absl::StatusOr<exposure::v1::RecordExposureResponse> resp =
        Failover<exposure::v1::RecordExposureRequest,
                 exposure::v1::RecordExposureResponse>(
            request.exposures(w.exposures[0]).user_id(),
            OwnersOfPartition(w.replica, replicas(),
                              replication_factor_.load()),
            part, kRecordExposure, /*hedge=*/false, &w.written_by);
    if (!resp.ok()) {
      const absl::Status& s = resp.status();
      w.status = absl::Status(
          s.code(), absl::StrCat("replica ", r, " (", w.exposures.size(),
                                 " exposures not written): ", s.message()));
      if (auto hint = s.GetPayload(kOwnerHintPayloadUrl)) {
        w.status.SetPayload(kOwnerHintPayloadUrl, *hint);
      }
      continue;
    }
    w.response = *std::move(resp);
    for (int i : w.exposures) {
      RememberWrite(request.exposures(i).user_id(),
                    w.response.written_offsets());
    }
    result.items_recorded += w.response.items_recorded();
    result.items_expired += w.response.items_expired();
  }
  return result;
}

absl::StatusOr<exposure::v1::FilterRecalledResponse>
RoutingClient::FilterRecalled(
    const exposure::v1::FilterRecalledRequest& request,
    int32_t* answered_by) const {
  v1::FilterRecalledRequest with_token;
  return Failover<v1::FilterRecalledRequest, v1::FilterRecalledResponse>(
      request.user_id(), OwnersForUser(request.user_id()),
      WithToken(request, &with_token), kFilterRecalled, /*hedge=*/true,
      answered_by);
}

std::optional<std::pair<int32_t, int64_t>> RoutingClient::WrittenOffset(
    absl::string_view user_id) const {
  if (tokens_ == nullptr) return std::nullopt;
  const int32_t p =
      KafkaPartitionForKey({user_id.data(), user_id.size()}, partitions_);
  const std::optional<int64_t> offset = tokens_->Lookup(user_id, p);
  if (!offset.has_value()) return std::nullopt;
  return std::make_pair(p, *offset);
}

absl::StatusOr<exposure::v1::GetFilterResponse> RoutingClient::GetFilter(
    const exposure::v1::GetFilterRequest& request) const {
  v1::GetFilterRequest with_token;
  return Failover<v1::GetFilterRequest, v1::GetFilterResponse>(
      request.user_id(), OwnersForUser(request.user_id()),
      WithToken(request, &with_token), kGetFilter, /*hedge=*/true);
}

absl::StatusOr<exposure::v1::GetUserStatsResponse> RoutingClient::GetUserStats(
    const exposure::v1::GetUserStatsRequest& request) const {
  v1::GetUserStatsRequest with_token;
  return Failover<v1::GetUserStatsRequest, v1::GetUserStatsResponse>(
      request.user_id(), OwnersForUser(request.user_id()),
      WithToken(request, &with_token), kGetUserStats, /*hedge=*/true);
}

// A write (idempotent, see the header): fails over, never hedged.
absl::StatusOr<exposure::v1::DeleteUserResponse> RoutingClient::DeleteUser(
    const exposure::v1::DeleteUserRequest& request) const {
  absl::StatusOr<v1::DeleteUserResponse> resp =
      Failover<v1::DeleteUserRequest, v1::DeleteUserResponse>(
          request.user_id(), OwnersForUser(request.user_id()), request,
          kDeleteUser, /*hedge=*/false);
  if (resp.ok()) RememberWrite(request.user_id(), resp->written_offsets());
  return resp;
}

absl::StatusOr<exposure::v1::ExplainResponse> RoutingClient::Explain(
    const exposure::v1::ExplainRequest& request) const {
  v1::ExplainRequest with_token;
  return Failover<v1::ExplainRequest, v1::ExplainResponse>(
      request.user_id(), OwnersForUser(request.user_id()),
      WithToken(request, &with_token), kExplain, /*hedge=*/true);
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
  // The router's GetFilter: its owner order, retry decision, tokens and
  // last-try allow_lagging, kept in one place for every read.
  const GetFilterCall get_filter =
      [router](const exposure::v1::GetFilterRequest& req) {
        return router->GetFilter(req);
      };
  for (int32_t r = 0; r < router->replicas(); ++r) {
    caches_.push_back(std::make_unique<FilterCache>(get_filter, options));
  }
}

absl::StatusOr<std::shared_ptr<const PulledFilter>> RoutingFilterCache::Get(
    absl::string_view surface, absl::string_view user_id,
    exposure::v1::ReadStaleness* staleness) {
  return caches_[router_->ReplicaForUser(user_id)]->Get(surface, user_id,
                                                        staleness);
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
    total.lagging_answers += s.lagging_answers;
  }
  return total;
}

}  // namespace exposure_filter
