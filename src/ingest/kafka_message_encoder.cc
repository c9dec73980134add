#include "src/ingest/kafka_message_encoder.h"

#include <google/protobuf/util/json_util.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace exposure_filter {
namespace {

size_t ItemsOf(const exposure::v1::Exposure& e) {
  return static_cast<size_t>(e.item_ids_size() + e.item_keys_size());
}

}  // namespace

absl::Status KafkaMessageEncoder::EncodeExposures(
    const exposure::v1::RecordExposureRequest& req,
    const std::vector<int>& indices, std::vector<LogMessage>* out) const {
  if (format_ != KafkaMessageFormat::kRequest && req.surface() != surface_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "surface: \"", req.surface(),
        "\" cannot be written through the "
        "exposure log: its --kafka_format=",
        KafkaMessageFormatName(format_),
        " messages carry no surface and every owner applies them to "
        "--kafka_surface=\"",
        surface_, "\" (docs/kafka.md)"));
  }
  if (format_ == KafkaMessageFormat::kRequest) {
    // One message per user, the user's exposures in call order: fewer
    // messages than one per exposure, and still a single key each.
    absl::flat_hash_map<absl::string_view, size_t> slot;  // user -> out index
    std::vector<exposure::v1::RecordExposureRequest> per_user;
    std::vector<std::vector<int>> positions;
    for (int i = 0; i < req.exposures_size(); ++i) {
      const exposure::v1::Exposure& e = req.exposures(i);
      auto [it, inserted] = slot.try_emplace(e.user_id(), per_user.size());
      if (inserted) {
        per_user.emplace_back().set_surface(req.surface());
        positions.emplace_back();
      }
      *per_user[it->second].add_exposures() = e;
      positions[it->second].push_back(indices[i]);
    }
    for (size_t u = 0; u < per_user.size(); ++u) {
      LogMessage& m = out->emplace_back();
      m.key = per_user[u].exposures(0).user_id();
      m.value = per_user[u].SerializeAsString();
      for (const exposure::v1::Exposure& e : per_user[u].exposures()) {
        m.items += ItemsOf(e);
      }
      m.what = absl::StrCat("exposures[", absl::StrJoin(positions[u], ","),
                            "] (user \"", m.key, "\")");
    }
    return absl::OkStatus();
  }
  for (int i = 0; i < req.exposures_size(); ++i) {
    const exposure::v1::Exposure& e = req.exposures(i);
    LogMessage& m = out->emplace_back();
    m.key = e.user_id();
    m.items = ItemsOf(e);
    m.what = absl::StrCat("exposures[", indices[i], "] (user \"", m.key, "\")");
    if (format_ == KafkaMessageFormat::kExposure) {
      m.value = e.SerializeAsString();
    } else {
      google::protobuf::util::JsonPrintOptions options;
      options.preserve_proto_field_names = true;
      const google::protobuf::util::Status s =
          google::protobuf::util::MessageToJsonString(e, &m.value, options);
      if (!s.ok()) {
        // A validated Exposure always prints; this is a bug, not bad input.
        return absl::InternalError(
            absl::StrCat("exposures[", indices[i], "]: JSON encoding failed: ",
                         std::string(s.message().data(), s.message().size())));
      }
    }
  }
  return absl::OkStatus();
}

LogMessage KafkaMessageEncoder::EncodeDeleteUser(
    const exposure::v1::DeleteUserRequest& req) const {
  LogMessage m;
  m.key = req.user_id();
  m.value = req.SerializeAsString();
  m.op = kLogOpDeleteUser;
  m.what = absl::StrCat("the delete of user \"", req.user_id(), "\"");
  return m;
}

LogMessage KafkaMessageEncoder::EncodeTraceChange(
    absl::string_view user_id, bool traced, int64_t traced_since_ms) const {
  exposure::v1::TracedUser record;
  record.set_user_id(std::string(user_id));
  if (traced) record.set_traced_since_ms(traced_since_ms);
  LogMessage m;
  m.key = std::string(user_id);
  m.value = record.SerializeAsString();
  m.op = traced ? kLogOpTraceAdd : kLogOpTraceRemove;
  m.what = absl::StrCat("the ", m.op, " of user \"", user_id, "\"");
  return m;
}

}  // namespace exposure_filter
