// OwnerHint: the machine-readable part of a partitioned replica's
// FAILED_PRECONDITION "not my user" answer (docs/scale-out.md).
//
// A replica that does not own a request's user answers FAILED_PRECONDITION
// with a readable message and, in the trailing metadata key
// "x-exposure-owner", the owner as "key=value" pairs joined by ';':
//
//   ordinal=1;partition=7;partitions=12;replicas=3;self=0;
//   address=ef-1.ef:50051   (one line)
//
// (self is the answering replica's ordinal; address only when the server knows
// it, --replica_address_template). With replication the pair
// "replication_factor=R" follows self: ordinal is then the user's owner 0
// and owners i < R are (partition + i) mod replicas
// (exposure_filter/partitioning.h). Absent means R = 1, so servers and
// decoders older than replication (which skip unknown keys) interoperate.
// Routing clients compare partitions/replicas with their own configuration: a
// mismatch means the client, or the cluster, is misconfigured. The C++ client
// (exposure_filter_client.h) copies the metadata into the returned absl::Status
// as a payload under kOwnerHintPayloadUrl.
#ifndef EXPOSURE_FILTER_OWNER_HINT_H_
#define EXPOSURE_FILTER_OWNER_HINT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace exposure_filter {

inline constexpr char kOwnerHintMetadataKey[] = "x-exposure-owner";
inline constexpr char kOwnerHintPayloadUrl[] =
    "type.exposure-filter.dev/exposure.v1.OwnerHint";

struct OwnerHint {
  int32_t ordinal = -1;            // the replica that owns the user
  int32_t partition = -1;          // the user's partition
  int32_t partitions = 0;          // the answering server's P
  int32_t replicas = 0;            // the answering server's N
  int32_t self = -1;               // the answering replica's ordinal
  int32_t replication_factor = 1;  // the answering server's R
  std::string address;             // the owner's address, "" if unknown

  std::string Encode() const {
    std::string out = absl::StrCat(
        "ordinal=", ordinal, ";partition=", partition,
        ";partitions=", partitions, ";replicas=", replicas, ";self=", self);
    if (replication_factor != 1) {
      absl::StrAppend(&out, ";replication_factor=", replication_factor);
    }
    if (!address.empty()) absl::StrAppend(&out, ";address=", address);
    return out;
  }

  // nullopt unless every numeric field is present and well-formed; unknown
  // keys are ignored (later versions may add some).
  static std::optional<OwnerHint> Decode(absl::string_view text) {
    OwnerHint hint;
    bool have_ordinal = false, have_partition = false, have_p = false,
         have_n = false;
    for (absl::string_view pair : absl::StrSplit(text, ';')) {
      const size_t eq = pair.find('=');
      if (eq == absl::string_view::npos) return std::nullopt;
      const absl::string_view key = pair.substr(0, eq);
      const absl::string_view value = pair.substr(eq + 1);
      if (key == "address") {
        hint.address = std::string(value);
        continue;
      }
      int32_t* field = key == "ordinal"              ? &hint.ordinal
                       : key == "partition"          ? &hint.partition
                       : key == "partitions"         ? &hint.partitions
                       : key == "replicas"           ? &hint.replicas
                       : key == "self"               ? &hint.self
                       : key == "replication_factor" ? &hint.replication_factor
                                                     : nullptr;
      if (field == nullptr) continue;
      if (!absl::SimpleAtoi(value, field)) return std::nullopt;
      if (key == "ordinal") have_ordinal = true;
      if (key == "partition") have_partition = true;
      if (key == "partitions") have_p = true;
      if (key == "replicas") have_n = true;
    }
    if (!have_ordinal || !have_partition || !have_p || !have_n) {
      return std::nullopt;
    }
    return hint;
  }

  // The hint carried by a status from the server (see above), if any.
  static std::optional<OwnerHint> FromStatus(const absl::Status& status) {
    const auto payload = status.GetPayload(kOwnerHintPayloadUrl);
    if (!payload.has_value()) return std::nullopt;
    return Decode(std::string(*payload));
  }
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_OWNER_HINT_H_
