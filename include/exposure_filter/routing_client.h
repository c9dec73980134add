// RoutingClient: the client of a partitioned cluster (docs/scale-out.md).
//
// A cluster of N replicas shares the P partitions of the exposure topic:
// user u lives in partition p = (murmur2(u) & 0x7fffffff) % P, exactly as
// Kafka's default partitioner places a record keyed by u, and replica
// r = p % N owns it (partitioning.h). A replica answers FAILED_PRECONDITION
// for anyone else's user, so every call must go to the owner. RoutingClient
// holds one ExposureFilterClient (one channel) per replica, in ordinal order,
// and sends each call there:
//
//   RoutingOptions opts;
//   opts.partitions = 12;
//   opts.replica_addresses =
//       StatefulSetReplicaAddresses("exposure-filter", "exposure-filter",
//                                   50051, 3);
//   auto router = RoutingClient::Connect(opts,
//                                        grpc::InsecureChannelCredentials());
//   (*router)->FilterRecalled(request);     // to the user's owner
//   RoutedRecordResult r = (*router)->RecordExposure(batch);  // split
//
// RecordExposure batches are split by owner, one RPC per owner, sent
// sequentially in ordinal order; each owner's write is all-or-nothing on its
// side, so the result lists per owner which exposures were written and which
// failed (and may be resent: recording is idempotent).
//
// A FAILED_PRECONDITION carrying the server's OwnerHint means client and
// cluster disagree (different P or N, or addresses not in ordinal order):
// the error says which, since no retry can fix it.
// Thread-safe.
#ifndef EXPOSURE_FILTER_ROUTING_CLIENT_H_
#define EXPOSURE_FILTER_ROUTING_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "exposure_filter/exposure_filter_client.h"
#include "exposure_filter/filter_cache.h"

namespace exposure_filter {

struct RoutingOptions {
  // The topic's partition count P; must equal the servers' --partitions.
  int32_t partitions = 0;
  // Replica i's address at index i (N = size()); must match the servers'
  // --replicas and ordinals.
  std::vector<std::string> replica_addresses;
  ClientOptions client;
};

// The StatefulSet's per-pod DNS names behind its headless Service:
// "<statefulset>-<i>.<service>[.<namespace>]:<port>" for i in [0, replicas).
std::vector<std::string> StatefulSetReplicaAddresses(
    absl::string_view statefulset, absl::string_view service, int port,
    int replicas, absl::string_view kubernetes_namespace = "");

// One owner's share of a routed RecordExposure.
struct OwnerWrite {
  int32_t replica = 0;
  // Indices into the request's exposures sent to this owner, in order.
  std::vector<int> exposures;
  absl::Status status;  // OK: all of them are durable on the owner
  exposure::v1::RecordExposureResponse response;  // when status is OK
};

struct RoutedRecordResult {
  std::vector<OwnerWrite> owners;  // ascending replica, owners with users only
  uint64_t items_recorded = 0;     // summed over the owners that succeeded
  uint64_t items_expired = 0;
  // OK when every owner succeeded, else the first failure (with its
  // owner named in the message).
  absl::Status status() const;
  // The exposures (indices) whose owner failed: resend those.
  std::vector<int> FailedExposures() const;
};

class RoutingClient {
 public:
  static absl::StatusOr<std::unique_ptr<RoutingClient>> Connect(
      const RoutingOptions& options,
      const std::shared_ptr<grpc::ChannelCredentials>& credentials);

  // Over existing clients, replica i at index i (tests; custom channels).
  static absl::StatusOr<std::unique_ptr<RoutingClient>> Create(
      int32_t partitions,
      std::vector<std::unique_ptr<ExposureFilterClient>> replicas);

  int32_t partitions() const { return partitions_; }
  int32_t replicas() const { return static_cast<int32_t>(clients_.size()); }
  // The ordinal owning `user_id`, and its client.
  int32_t ReplicaForUser(absl::string_view user_id) const;
  const ExposureFilterClient& ClientForReplica(int32_t replica) const {
    return *clients_[replica];
  }
  const ExposureFilterClient& ClientForUser(absl::string_view user_id) const {
    return *clients_[ReplicaForUser(user_id)];
  }

  RoutedRecordResult RecordExposure(
      const exposure::v1::RecordExposureRequest& request) const;
  absl::StatusOr<exposure::v1::FilterRecalledResponse> FilterRecalled(
      const exposure::v1::FilterRecalledRequest& request) const;
  absl::StatusOr<exposure::v1::GetFilterResponse> GetFilter(
      const exposure::v1::GetFilterRequest& request) const;
  absl::StatusOr<exposure::v1::GetUserStatsResponse> GetUserStats(
      const exposure::v1::GetUserStatsRequest& request) const;
  absl::StatusOr<exposure::v1::DeleteUserResponse> DeleteUser(
      const exposure::v1::DeleteUserRequest& request) const;
  absl::StatusOr<exposure::v1::ExplainResponse> Explain(
      const exposure::v1::ExplainRequest& request) const;
  // Every replica's stats, in ordinal order (the first failure if any).
  absl::StatusOr<std::vector<exposure::v1::GetServerStatsResponse>>
  GetServerStats() const;

  // A status from replica `replica` turned into a routing diagnosis when it
  // carries an OwnerHint (see above); other statuses pass unchanged.
  absl::Status Diagnose(int32_t replica, absl::Status status) const;

 private:
  RoutingClient(int32_t partitions,
                std::vector<std::unique_ptr<ExposureFilterClient>> clients)
      : partitions_(partitions), clients_(std::move(clients)) {}

  const int32_t partitions_;
  const std::vector<std::unique_ptr<ExposureFilterClient>> clients_;
};

// Pull mode across the cluster: one FilterCache per replica, each user's
// filter pulled from (and revalidated with) its owner.
class RoutingFilterCache {
 public:
  // `router` must outlive the cache; max_users applies per replica.
  RoutingFilterCache(const RoutingClient* router,
                     const FilterCacheOptions& options);

  absl::StatusOr<std::shared_ptr<const PulledFilter>> Get(
      absl::string_view surface, absl::string_view user_id);
  void Invalidate(absl::string_view surface, absl::string_view user_id);
  FilterCacheStats stats() const;  // summed over replicas

 private:
  const RoutingClient* const router_;
  std::vector<std::unique_ptr<FilterCache>> caches_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_ROUTING_CLIENT_H_
