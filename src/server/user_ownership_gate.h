// UserOwnershipGate: the scale-out check at the RPC edge. A
// partitioned replica serves only the users of its partitions; a request
// naming another replica's user is answered FAILED_PRECONDITION, naming the
// field, the user's partition and the owner, with an OwnerHint payload
// (include/exposure_filter/owner_hint.h) the gRPC edge turns into trailing
// metadata so routing clients can tell a stale route from a misconfigured
// cluster. An unpartitioned gate owns every user. With replication factor
// R >= 2 a replica owns the users of every partition it is one of
// the R owners of, and the message names all R owners.
#ifndef EXPOSURE_FILTER_SRC_SERVER_USER_OWNERSHIP_GATE_H_
#define EXPOSURE_FILTER_SRC_SERVER_USER_OWNERSHIP_GATE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "src/cluster/replica_ownership.h"

namespace exposure_filter {

class UserOwnershipGate {
 public:
  // `address_template` names replicas for the error messages: "{ordinal}"
  // is replaced by the owner's ordinal, e.g.
  // "exposure-filter-{ordinal}.exposure-filter:50051"; "" = unknown.
  UserOwnershipGate(ClusterOptions cluster, std::string address_template)
      : ownership_(cluster), address_template_(std::move(address_template)) {}

  const ReplicaOwnership& ownership() const { return ownership_; }

  bool Owns(absl::string_view user_id) const {
    return ownership_.OwnsUser(user_id);
  }
  // OK when this replica owns `user_id` (always, unpartitioned); else
  // FailedPrecondition "<field>: user ... is in partition p, owned by
  // replica r (address) ..." (R >= 2: "replicas r1 (a1), r2 (a2)"),
  // carrying the OwnerHint payload.
  absl::Status Check(absl::string_view field, absl::string_view user_id) const;
  // The same answer for a partition named directly (a read's
  // min_offsets): OK when this replica is one of its owners.
  absl::Status CheckPartition(absl::string_view field, int32_t partition) const;

  // OK unless the deployment is replicated (R >= 2): then `rpc` (a write
  // answered by this replica alone, RecordExposure or DeleteUser) is
  // FailedPrecondition, because only a change taken from the Kafka log
  // reaches every copy; it would otherwise diverge the copies silently.
  absl::Status CheckDirectWrite(absl::string_view rpc) const;

  // The template with the ordinal filled in; "" without a template.
  std::string ReplicaAddress(int32_t ordinal) const;

 private:
  // FailedPrecondition "<field>: <what> of P, owned by replica(s) ..." with
  // the OwnerHint of `partition`.
  absl::Status NotOwner(absl::string_view field, absl::string_view what,
                        int32_t partition) const;

  const ReplicaOwnership ownership_;
  const std::string address_template_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_USER_OWNERSHIP_GATE_H_
