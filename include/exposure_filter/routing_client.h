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
//
// Replication: with replication_factor R each user has R owners,
// owner i = (partition + i) mod N (partitioning.h). Every call goes to owner
// 0 first (stable per user, so its caches stay warm) and fails over to
// owner 1, 2, ... INSIDE the same deadline (ClientOptions::deadline) when a
// try ends in UNAVAILABLE (the server says so, e.g. a copy still catching
// up, or the connection fails) or exceeds FailoverOptions::per_try_timeout.
// RecordExposure fails over too: the service makes re-recording a no-op and,
// replicated, any owner writes to the shared Kafka log, so a write that
// reached a dead owner and is resent to the next one is applied once.
// Reads may be hedged: FailoverOptions::hedge_delay after a try started and
// has not answered, the next owner gets the same request too; the first OK
// answer wins, the other try is cancelled. Other codes are final (a bad
// request is bad on every owner), except a FAILED_PRECONDITION whose owner
// hint reports another R with the same P and N: the client adopts the
// server's R and goes on with the owners it has not tried. stats() counts
// failovers, hedges, such placement updates and failed tries per replica.
//
// Least-stale reads: a read's try on the user's last owner (R >= 2; a
// failover or a hedge) sets allow_lagging, so that copy answers even when
// it lags past its --max_serving_lag rather than UNAVAILABLE: a read fails
// only when no owner can answer at all (down, replaying, or short of
// min_offsets). The response's `staleness` says how far behind the copy
// that answered was (lag_ms of the user's partition; `lagging` when it
// answered past its bound), and stats().lagging_answers counts those.
//
// Read-your-writes (ReadYourWritesOptions): a replicated
// server answers a write with the Kafka offsets it got (written_offsets);
// the client remembers, per user, the offset of the user's partition and
// sends it with that user's later reads (min_offsets, unless the request
// sets its own). A copy that has not applied it answers UNAVAILABLE and the
// read fails over like any other UNAVAILABLE: the user sees its own writes,
// at the cost of a failover (or, if no owner has applied it yet, a failed
// read) while the copies catch up. RoutingFilterCache's revalidations carry
// them too (below). Thread-safe.
#ifndef EXPOSURE_FILTER_ROUTING_CLIENT_H_
#define EXPOSURE_FILTER_ROUTING_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "exposure_filter/exposure_filter_client.h"
#include "exposure_filter/filter_cache.h"

namespace exposure_filter {

class ReadYourWritesTokens;

// How a call moves between a user's owners (see above; docs/clients.md).
struct FailoverOptions {
  // The longest one try may take before the next owner is tried; zero: a try
  // may use the whole deadline (a hanging owner then fails the call). Keep
  // it above the server's p99 plus the channel's own UNAVAILABLE retries
  // (ClientOptions::max_attempts), which happen inside each try.
  absl::Duration per_try_timeout = absl::ZeroDuration();
  // Reads only: after this delay without an answer, send the same read to
  // the next owner as well; zero: no hedging. A hedge costs the next owner
  // one more call, so choose about the p95 of a read.
  absl::Duration hedge_delay = absl::ZeroDuration();
};

// Read-your-writes tokens (see above; docs/scale-out.md "Consistency").
struct ReadYourWritesOptions {
  bool enabled = false;
  // Users whose offsets are kept one by one; past it they fold into one
  // offset per partition (stricter for that partition's users, never
  // weaker): memory is bounded by max_users + partitions entries.
  size_t max_users = 100000;
};

struct RoutingOptions {
  // The topic's partition count P; must equal the servers' --partitions.
  int32_t partitions = 0;
  // Replica i's address at index i (N = size()); must match the servers'
  // --replicas and ordinals.
  std::vector<std::string> replica_addresses;
  // R, the owners per partition (1 <= R <= N); should equal the servers'
  // --replication_factor; an owner hint saying otherwise updates it.
  int32_t replication_factor = 1;
  FailoverOptions failover;
  ReadYourWritesOptions read_your_writes;
  // The deadline covers every owner tried (and their channel retries).
  ClientOptions client;
};

// The client's counters since it was created (monotonic).
struct RoutingStats {
  uint64_t failovers = 0;  // tries on a next owner after a failed try
  uint64_t hedges = 0;     // tries on a next owner while one was running
  uint64_t placement_updates = 0;  // R adopted from an owner hint
  // Reads sent with this client's own write offsets (read-your-writes).
  uint64_t reads_with_offsets = 0;
  // Reads answered by a copy lagging past its --max_serving_lag, on the
  // last owner's try (staleness.lagging in the response).
  uint64_t lagging_answers = 0;
  // Failed tries per replica, index = ordinal (cancelled hedges excluded).
  std::vector<uint64_t> replica_errors;
};

// The StatefulSet's per-pod DNS names behind its headless Service:
// "<statefulset>-<i>.<service>[.<namespace>]:<port>" for i in [0, replicas).
std::vector<std::string> StatefulSetReplicaAddresses(
    absl::string_view statefulset, absl::string_view service, int port,
    int replicas, absl::string_view kubernetes_namespace = "");

// One owner's share of a routed RecordExposure.
struct OwnerWrite {
  int32_t replica = 0;      // the exposures' owner 0
  int32_t written_by = -1;  // the owner that acknowledged them, if any
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
  // The call deadline is replica 0's ClientOptions::deadline.
  static absl::StatusOr<std::unique_ptr<RoutingClient>> Create(
      int32_t partitions,
      std::vector<std::unique_ptr<ExposureFilterClient>> replicas,
      int32_t replication_factor = 1, const FailoverOptions& failover = {},
      const ReadYourWritesOptions& read_your_writes = {});
  ~RoutingClient();

  int32_t partitions() const { return partitions_; }
  int32_t replicas() const { return static_cast<int32_t>(clients_.size()); }
  // R as configured, or as last learnt from an owner hint.
  int32_t replication_factor() const { return replication_factor_.load(); }
  // The ordinal of `user_id`'s owner 0, and its client.
  int32_t ReplicaForUser(absl::string_view user_id) const;
  // The user's R owners, owner 0 first: the order calls try them in.
  std::vector<int32_t> OwnersForUser(absl::string_view user_id) const;
  RoutingStats stats() const;
  const ExposureFilterClient& ClientForReplica(int32_t replica) const {
    return *clients_[replica];
  }
  const ExposureFilterClient& ClientForUser(absl::string_view user_id) const {
    return *clients_[ReplicaForUser(user_id)];
  }

  RoutedRecordResult RecordExposure(
      const exposure::v1::RecordExposureRequest& request) const;
  // *answered_by (if set): the replica whose answer is returned.
  absl::StatusOr<exposure::v1::FilterRecalledResponse> FilterRecalled(
      const exposure::v1::FilterRecalledRequest& request,
      int32_t* answered_by = nullptr) const;
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

  // Read-your-writes on: the offset this client's latest write of
  // `user_id` got in the user's partition (what its reads carry as
  // min_offsets), and the partition; nullopt when none is remembered.
  std::optional<std::pair<int32_t, int64_t>> WrittenOffset(
      absl::string_view user_id) const;

  // A status from replica `replica` turned into a routing diagnosis when it
  // carries an OwnerHint (see above); other statuses pass unchanged.
  absl::Status Diagnose(int32_t replica, absl::Status status) const;

 private:
  RoutingClient(int32_t partitions,
                std::vector<std::unique_ptr<ExposureFilterClient>> clients,
                int32_t replication_factor, const FailoverOptions& failover,
                const ReadYourWritesOptions& read_your_writes);
  // `request`, or (read-your-writes on, a token for its user, no
  // min_offsets of its own) a copy in *with_token carrying the token.
  template <typename Request>
  const Request& WithToken(const Request& request, Request* with_token) const;
  // Remembers what a write of `user_id` got (read-your-writes on).
  void RememberWrite(
      absl::string_view user_id,
      const google::protobuf::Map<int32_t, int64_t>& written_offsets) const;

  // One call for `user_id` with failover (and hedging if `hedge`), sending
  // `request` with `method` of the callback API (failover_call.h).
  template <typename Request, typename Response, typename Method>
  absl::StatusOr<Response> Failover(absl::string_view user_id,
                                    std::vector<int32_t> owners,
                                    const Request& request, Method method,
                                    bool hedge,
                                    int32_t* answered_by = nullptr) const;
  // The owners to go on with after `status` (a FAILED_PRECONDITION), or
  // empty; adopts the hint's R when only R differs.
  std::vector<int32_t> Replan(absl::string_view user_id,
                              const absl::Status& status) const;

  const int32_t partitions_;
  const std::vector<std::unique_ptr<ExposureFilterClient>> clients_;
  const FailoverOptions failover_;
  mutable std::atomic<int32_t> replication_factor_;
  mutable std::atomic<uint64_t> failovers_{0};
  mutable std::atomic<uint64_t> hedges_{0};
  mutable std::atomic<uint64_t> placement_updates_{0};
  mutable std::atomic<uint64_t> reads_with_offsets_{0};
  mutable std::atomic<uint64_t> lagging_answers_{0};
  const std::unique_ptr<std::atomic<uint64_t>[]> replica_errors_;
  // Null unless read-your-writes is on.
  const std::unique_ptr<ReadYourWritesTokens> tokens_;
};

// Pull mode across the cluster: a FilterCache whose GetFilter calls are
// the router's, so they fail over between the user's owners exactly as its
// other reads do (same codes, per-try timeout, owner hints, hedging, and
// allow_lagging on the last owner's try). A filter pulled from one owner
// is revalidated at whichever owner answers next: its `version` is the
// checksum of the encoded bytes, which name no copy (src/filter/
// filter_encoder.h), so two copies answer "not modified" to the same
// version exactly when they would send the same bytes; copies whose bytes
// differ cost a full pull, never a wrong answer.
//
// Read-your-writes (the router's ReadYourWritesOptions on): every Get
// revalidates, and carries the user's token (the offset of the router's
// latest acknowledged write of the user, in the user's partition) as
// min_offsets, on every try, the allow_lagging one included. So the rule
// is: a held filter is served only on a "not modified" from a copy that
// has applied the user's last acknowledged write; a copy that has not
// refuses (UNAVAILABLE), the next owner is asked, and when no owner has
// applied it yet Get fails UNAVAILABLE rather than serve the held copy,
// which may predate the write. A filter pulled before the write and still
// current at such a copy holds the same bytes as that copy, write
// included.
//
// Least-stale answers: Get's *staleness is the answering copy's; answers
// from a copy past its --max_serving_lag (the last owner's try) count in
// stats().lagging_answers, and the filter such an answer carries is cached
// like any other (the next Get revalidates it, at owner 0 first).
class RoutingFilterCache {
 public:
  // `router` must outlive the cache. Users are grouped by their owner 0,
  // one FilterCache per replica; max_users applies to each group.
  RoutingFilterCache(const RoutingClient* router,
                     const FilterCacheOptions& options);

  // As FilterCache::Get, through the router (see above).
  absl::StatusOr<std::shared_ptr<const PulledFilter>> Get(
      absl::string_view surface, absl::string_view user_id,
      exposure::v1::ReadStaleness* staleness = nullptr);
  void Invalidate(absl::string_view surface, absl::string_view user_id);
  FilterCacheStats stats() const;  // summed over replicas

 private:
  const RoutingClient* const router_;
  std::vector<std::unique_ptr<FilterCache>> caches_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_ROUTING_CLIENT_H_
