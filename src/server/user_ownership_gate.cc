#include "src/server/user_ownership_gate.h"

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
  if (!ownership_.partitioned()) return absl::OkStatus();
  OwnerHint hint;
  hint.partition = ownership_.PartitionOfUser(user_id);
  hint.ordinal =
      ReplicaForPartition(hint.partition, ownership_.options().replicas);
  if (hint.ordinal == ownership_.options().replica_ordinal) {
    return absl::OkStatus();
  }
  hint.partitions = ownership_.options().partitions;
  hint.replicas = ownership_.options().replicas;
  hint.self = ownership_.options().replica_ordinal;
  hint.address = ReplicaAddress(hint.ordinal);
  // User ids are bounded (--max_id_bytes) and already validated: quoting
  // one in the message is safe and is what an operator needs to reproduce.
  absl::Status status = absl::FailedPreconditionError(absl::StrCat(
      field, ": user \"", user_id, "\" is in partition ", hint.partition,
      " of ", hint.partitions, ", owned by replica ", hint.ordinal,
      hint.address.empty() ? "" : absl::StrCat(" (", hint.address, ")"),
      ", not by this replica ", ownership_.options().replica_ordinal, " of ",
      hint.replicas,
      "; send it to the owner (replica = (murmur2(user_id) & 0x7fffffff) % "
      "partitions % replicas, docs/scale-out.md)"));
  status.SetPayload(kOwnerHintPayloadUrl, absl::Cord(hint.Encode()));
  return status;
}

}  // namespace exposure_filter
