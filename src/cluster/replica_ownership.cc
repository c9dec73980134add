#include "src/cluster/replica_ownership.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "exposure_filter/partitioning.h"

namespace exposure_filter {

absl::Status ClusterOptions::Validate() const {
  if (partitions < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--partitions must be >= 0, got ", partitions));
  }
  if (replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas must be >= 1, got ", replicas));
  }
  if (replica_ordinal < 0 || replica_ordinal >= replicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replica_ordinal must be in [0, --replicas=", replicas,
                     "), got ", replica_ordinal));
  }
  if (partitions == 0 && replicas > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas=", replicas, " needs --partitions (the topic's partition ",
        "count): replicas own partitions"));
  }
  if (partitions > 0 && replicas > partitions) {
    // A replica without a partition would own no users at all.
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas=", replicas, " exceeds --partitions=", partitions,
        ": some replicas would own nothing"));
  }
  if (replication_factor < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replication_factor must be >= 1, got ", replication_factor));
  }
  if (replication_factor > replicas) {
    // Owner i = (p + i) mod N repeats a replica once i reaches N: R copies
    // need R distinct replicas.
    return absl::InvalidArgumentError(absl::StrCat(
        "--replication_factor=", replication_factor, " exceeds --replicas=",
        replicas, ": each partition's copies must be on distinct replicas"));
  }
  return absl::OkStatus();
}

absl::Status ClusterOptions::ValidateWithIngest(bool kafka_ingest) const {
  if (absl::Status s = Validate(); !s.ok()) return s;
  if (replication_factor > 1 && !kafka_ingest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replication_factor=", replication_factor,
        " needs Kafka ingest (--kafka_brokers): the copies of a partition stay "
        "equal only by each consuming the same Kafka log"));
  }
  return absl::OkStatus();
}

int32_t ReplicaOwnership::PartitionOfUser(absl::string_view user_id) const {
  if (!partitioned()) return -1;
  return KafkaPartitionForKey({user_id.data(), user_id.size()},
                              options_.partitions);
}

int32_t ReplicaOwnership::OwnerOfUser(absl::string_view user_id) const {
  if (!partitioned()) return options_.replica_ordinal;
  return ReplicaForPartition(PartitionOfUser(user_id), options_.replicas);
}

std::vector<int32_t> ReplicaOwnership::OwnersOfUser(
    absl::string_view user_id) const {
  if (!partitioned()) return {options_.replica_ordinal};
  return OwnersOfPartition(PartitionOfUser(user_id), options_.replicas,
                           options_.replication_factor);
}

bool ReplicaOwnership::OwnsUser(absl::string_view user_id) const {
  if (!partitioned()) return true;
  return OwnerIndexOfReplica(options_.replica_ordinal, PartitionOfUser(user_id),
                             options_.replicas,
                             options_.replication_factor) >= 0;
}

std::vector<int32_t> ReplicaOwnership::OwnedPartitions() const {
  if (!partitioned()) return {};
  return PartitionsOfReplica(options_.replica_ordinal, options_.partitions,
                             options_.replicas, options_.replication_factor);
}

absl::StatusOr<int32_t> OrdinalFromHostname(absl::string_view hostname) {
  const size_t dash = hostname.rfind('-');
  int32_t ordinal = -1;
  if (dash == absl::string_view::npos || dash + 1 == hostname.size() ||
      !absl::SimpleAtoi(hostname.substr(dash + 1), &ordinal) || ordinal < 0 ||
      hostname.substr(dash + 1).find_first_not_of("0123456789") !=
          absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hostname '", hostname,
        "' does not end in -<ordinal> (a StatefulSet pod name); set "
        "--replica_ordinal"));
  }
  return ordinal;
}

}  // namespace exposure_filter
