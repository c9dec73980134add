#include "src/ingest/kafka_message_decoder.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/ingest/kafka_message_encoder.h"

namespace exposure_filter {

const char* BadMessageReasonName(BadMessageReason reason) {
  switch (reason) {
    case BadMessageReason::kUndecodable:
      return "undecodable";
    case BadMessageReason::kMissingUser:
      return "missing_user";
    case BadMessageReason::kKeyMismatch:
      return "key_mismatch";
    case BadMessageReason::kNotOwned:
      return "not_owned";
    case BadMessageReason::kEventTime:
      return "event_time";
    case BadMessageReason::kInvalid:
      return "invalid";
    case BadMessageReason::kTraceFull:
      return "trace_full";
  }
  return "?";
}

std::optional<BadMessageReason> KafkaMessageDecoder::Decode(
    absl::string_view key, absl::string_view value,
    exposure::v1::RecordExposureRequest* out, std::string* why) const {
  out->Clear();
  switch (format_) {
    case KafkaMessageFormat::kRequest:
      if (!out->ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        *why = absl::StrCat("not a protobuf RecordExposureRequest (",
                            value.size(), " bytes)");
        return BadMessageReason::kUndecodable;
      }
      break;
    case KafkaMessageFormat::kExposure:
      out->set_surface(surface_);
      if (!out->add_exposures()->ParseFromArray(
              value.data(), static_cast<int>(value.size()))) {
        *why =
            absl::StrCat("not a protobuf Exposure (", value.size(), " bytes)");
        return BadMessageReason::kUndecodable;
      }
      break;
    case KafkaMessageFormat::kJson: {
      out->set_surface(surface_);
      // Unknown fields are an error: a misspelt "item_id" must not turn
      // into an exposure of nothing.
      google::protobuf::util::JsonParseOptions options;
      options.ignore_unknown_fields = false;
      const google::protobuf::util::Status s =
          google::protobuf::util::JsonStringToMessage(
              google::protobuf::StringPiece(value.data(), value.size()),
              out->add_exposures(), options);
      if (!s.ok()) {
        *why =
            absl::StrCat("not a JSON Exposure: ",
                         std::string(s.message().data(), s.message().size()));
        return BadMessageReason::kUndecodable;
      }
      break;
    }
  }
  if (out->exposures_size() == 0) {
    *why = "no exposures";
    return BadMessageReason::kMissingUser;
  }
  for (const exposure::v1::Exposure& e : out->exposures()) {
    if (e.user_id().empty()) {
      *why = "an exposure has no user_id";
      return BadMessageReason::kMissingUser;
    }
    if (e.user_id() != key) {
      *why = key.empty()
                 ? std::string("message has no key (the user id)")
                 : absl::StrCat("key is not the user_id of an exposure ", "(",
                                e.user_id().size(), "-byte user)");
      return BadMessageReason::kKeyMismatch;
    }
  }
  // The key equals every user id now, so one ownership check covers all.
  return CheckOwned(key, why);
}

std::optional<BadMessageReason> KafkaMessageDecoder::DecodeDeleteUser(
    absl::string_view key, absl::string_view value,
    exposure::v1::DeleteUserRequest* out, std::string* why) const {
  out->Clear();
  const bool parsed =
      out->ParseFromArray(value.data(), static_cast<int>(value.size()));
  return CheckUserRecord(kLogOpDeleteUser, parsed, value.size(), out->user_id(),
                         key, why);
}

std::optional<BadMessageReason> KafkaMessageDecoder::DecodeTraceChange(
    absl::string_view op, absl::string_view key, absl::string_view value,
    exposure::v1::TracedUser* out, std::string* why) const {
  out->Clear();
  const bool parsed =
      out->ParseFromArray(value.data(), static_cast<int>(value.size()));
  if (std::optional<BadMessageReason> bad =
          CheckUserRecord(op, parsed, value.size(), out->user_id(), key, why);
      bad.has_value()) {
    return bad;
  }
  // Without it an owner would have to invent one (its own clock), and the
  // copies would disagree on what the trace proves (Explain's verdicts).
  if (op == kLogOpTraceAdd && out->traced_since_ms() <= 0) {
    *why = absl::StrCat("a trace_add record's traced_since_ms is ",
                        out->traced_since_ms(), ", not a time");
    return BadMessageReason::kInvalid;
  }
  return std::nullopt;
}

std::optional<BadMessageReason> KafkaMessageDecoder::CheckUserRecord(
    absl::string_view op, bool parsed, size_t value_size,
    absl::string_view user_id, absl::string_view key, std::string* why) const {
  if (!parsed) {
    *why = absl::StrCat(
        "not a protobuf ",
        op == kLogOpDeleteUser ? "DeleteUserRequest" : "TracedUser", " (",
        value_size, " bytes) in a ", op, " record");
    return BadMessageReason::kUndecodable;
  }
  if (user_id.empty()) {
    *why = absl::StrCat("a ", op, " record has no user_id");
    return BadMessageReason::kMissingUser;
  }
  if (user_id != key) {
    *why = key.empty()
               ? std::string("message has no key (the user id)")
               : absl::StrCat("key is not the ", op, " record's user_id");
    return BadMessageReason::kKeyMismatch;
  }
  return CheckOwned(key, why);
}

std::optional<BadMessageReason> KafkaMessageDecoder::CheckOwned(
    absl::string_view key, std::string* why) const {
  if (ownership_ != nullptr && !ownership_->OwnsUser(key)) {
    *why =
        absl::StrCat("user belongs to partition ",
                     ownership_->PartitionOfUser(key), " of replica",
                     ownership_->options().replication_factor > 1 ? "s " : " ",
                     absl::StrJoin(ownership_->OwnersOfUser(key), ","));
    return BadMessageReason::kNotOwned;
  }
  return std::nullopt;
}

}  // namespace exposure_filter
