// ReplicaOwnership: which users and Kafka partitions this replica serves.
//
// The service scales out on Kafka partitions: P partitions, N replicas,
// replication factor R. Partition p is owned by the R replicas
// (p + i) mod N, i = 0..R-1; a replica (its StatefulSet ordinal) consumes and
// serves every partition it is one of the owners of, and the users whose
// partition is one of those (the arithmetic is in
// include/exposure_filter/partitioning.h, shared with the clients). R = 1 is
// the unreplicated layout (p mod N == r). With partitions == 0 the server is
// not partitioned and owns every user.
#ifndef EXPOSURE_FILTER_SRC_CLUSTER_REPLICA_OWNERSHIP_H_
#define EXPOSURE_FILTER_SRC_CLUSTER_REPLICA_OWNERSHIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace exposure_filter {

struct ClusterOptions {
  // Partitions of the exposure topic (P); 0 = not partitioned.
  int32_t partitions = 0;
  // Replicas sharing the partitions (N) and this one's 0-based ordinal.
  int32_t replicas = 1;
  int32_t replica_ordinal = 0;
  // Owners of every partition (R); 1 = no copies.
  int32_t replication_factor = 1;

  // InvalidArgument naming the flag when the combination is impossible
  // (P < 0, N < 1, ordinal outside [0, N), N > P when partitioned, R outside
  // [1, N]).
  absl::Status Validate() const;
  // Validate(), and R >= 2 only with Kafka ingest on: the copies stay equal
  // only by each consuming the same log (docs/scale-out.md).
  absl::Status ValidateWithIngest(bool kafka_ingest) const;
};

class ReplicaOwnership {
 public:
  explicit ReplicaOwnership(ClusterOptions options) : options_(options) {}

  const ClusterOptions& options() const { return options_; }
  bool partitioned() const { return options_.partitions > 0; }

  // The user's partition, or -1 when not partitioned.
  int32_t PartitionOfUser(absl::string_view user_id) const;
  // The ordinal of the user's owner 0, the preferred one (this replica's
  // when not partitioned).
  int32_t OwnerOfUser(absl::string_view user_id) const;
  // All R owners of the user, owner 0 first ({this replica} when not
  // partitioned).
  std::vector<int32_t> OwnersOfUser(absl::string_view user_id) const;
  // Whether this replica is one of the user's R owners.
  bool OwnsUser(absl::string_view user_id) const;
  // The partitions this replica consumes and serves (those it is one of the
  // R owners of), ascending; empty when not partitioned.
  std::vector<int32_t> OwnedPartitions() const;

 private:
  ClusterOptions options_;
};

// The ordinal a StatefulSet gives its pod in the hostname: "<name>-<n>",
// e.g. "exposure-filter-2" -> 2. InvalidArgument when there is no "-<n>"
// suffix.
absl::StatusOr<int32_t> OrdinalFromHostname(absl::string_view hostname);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_CLUSTER_REPLICA_OWNERSHIP_H_
