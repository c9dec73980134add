#include "src/server/user_ownership_gate.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "exposure_filter/owner_hint.h"
#include "exposure_filter/partitioning.h"

namespace exposure_filter {

std::string UserOwnershipGate::ReplicaAddress(int32_t ordinal) const {
  if (address_template_.empty()) return "";
  return absl::StrReplaceAll(address_template_,
                             {{"{ordinal}", absl::StrCat(ordinal)}});
}

absl::Status UserOwnershipGate::Check(absl::string_view field,
                                      absl::string_view user_id) const {
  if (ownership_.OwnsUser(user_id)) return absl::OkStatus();
  return NotOwner(field,
                  absl::StrCat("user \"", user_id, "\" is in partition ",
                               ownership_.PartitionOfUser(user_id)),
                  ownership_.PartitionOfUser(user_id));
}

absl::Status UserOwnershipGate::CheckPartition(absl::string_view field,
                                               int32_t partition) const {
  const std::vector<int32_t> owned = ownership_.OwnedPartitions();
  if (!ownership_.partitioned() ||
      std::find(owned.begin(), owned.end(), partition) != owned.end()) {
    return absl::OkStatus();
  }
  return NotOwner(field, absl::StrCat("partition ", partition), partition);
}

absl::Status UserOwnershipGate::NotOwner(absl::string_view field,
                                         absl::string_view what,
                                         int32_t partition) const {
  const ClusterOptions& cluster = ownership_.options();
  OwnerHint hint;
  hint.partition = partition;
  hint.ordinal = ReplicaForPartition(hint.partition, cluster.replicas);
  hint.partitions = cluster.partitions;
  hint.replicas = cluster.replicas;
  hint.self = cluster.replica_ordinal;
  hint.replication_factor = cluster.replication_factor;
  hint.address = ReplicaAddress(hint.ordinal);
  // "replica 4 (addr)" or, replicated, "replicas 4 (addr), 5 (addr)".
  std::string owners;
  for (int32_t owner : OwnersOfPartition(partition, cluster.replicas,
                                         cluster.replication_factor)) {
    const std::string address = ReplicaAddress(owner);
    absl::StrAppend(&owners, owners.empty() ? "" : ", ", owner,
                    address.empty() ? "" : absl::StrCat(" (", address, ")"));
  }
  const bool replicated = cluster.replication_factor > 1;
  // User ids are bounded (--max_id_bytes) and already validated: quoting
  // one in the message is safe and is what an operator needs to reproduce.
  absl::Status status = absl::FailedPreconditionError(absl::StrCat(
      field, ": ", what, " of ", hint.partitions, ", owned by replica",
      replicated ? "s " : " ", owners, ", not by this replica ",
      cluster.replica_ordinal, " of ", hint.replicas,
      replicated
          ? absl::StrCat("; send it to an owner (owner i < ",
                         cluster.replication_factor,
                         " = ((murmur2(user_id) & 0x7fffffff) % partitions + "
                         "i) % replicas, docs/scale-out.md)")
          : "; send it to the owner (replica = (murmur2(user_id) & "
            "0x7fffffff) % partitions % replicas, docs/scale-out.md)"));
  status.SetPayload(kOwnerHintPayloadUrl, absl::Cord(hint.Encode()));
  return status;
}

absl::Status UserOwnershipGate::CheckDirectWrite(absl::string_view rpc) const {
  const ClusterOptions& cluster = ownership_.options();
  if (cluster.replication_factor <= 1) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      rpc, ": --replication_factor=", cluster.replication_factor,
      " keeps the copies equal through the Kafka topic, and a direct write "
      "would reach this copy only; produce the change to the exposure topic "
      "(docs/kafka.md), whose every owner applies it"));
}

}  // namespace exposure_filter
