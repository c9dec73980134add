#include "src/server/request_validation.h"

#include "absl/strings/str_cat.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

absl::Status ValidateKey(absl::string_view field, absl::string_view key,
                         const RequestLimits& limits) {
  if (key.empty()) return Invalid(field, "empty");
  if (key.size() > limits.max_id_bytes) {
    return Invalid(field, absl::StrCat(key.size(), " bytes exceeds the limit of ",
                                       limits.max_id_bytes,
                                       " (--max_id_bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateUserId(absl::string_view field, absl::string_view user_id,
                            const RequestLimits& limits) {
  return ValidateKey(field, user_id, limits);
}

absl::Status ValidateRecordExposure(
    const exposure::v1::RecordExposureRequest& req,
    const RequestLimits& limits, int64_t now_ms) {
  if (absl::Status s = SurfaceRegistry::ValidateName(req.surface()); !s.ok()) {
    return s;
  }
  if (static_cast<size_t>(req.exposures_size()) >
      limits.max_exposures_per_request) {
    return Invalid("exposures",
                   absl::StrCat(req.exposures_size(), " exceeds the limit of ",
                                limits.max_exposures_per_request,
                                " per request (--max_exposures_per_request)"));
  }
  const int64_t latest_ok =
      now_ms + absl::ToInt64Milliseconds(limits.max_future_skew);
  size_t items = 0;
  for (int i = 0; i < req.exposures_size(); ++i) {
    const exposure::v1::Exposure& e = req.exposures(i);
    const std::string prefix = absl::StrCat("exposures[", i, "]");
    if (absl::Status s =
            ValidateUserId(absl::StrCat(prefix, ".user_id"), e.user_id(), limits);
        !s.ok()) {
      return s;
    }
    if (e.event_time_ms() < 0) {
      return Invalid(absl::StrCat(prefix, ".event_time_ms"),
                     absl::StrCat(e.event_time_ms(),
                                  " is negative (Unix ms expected; 0 = now)"));
    }
    if (e.event_time_ms() > latest_ok) {
      return Invalid(
          absl::StrCat(prefix, ".event_time_ms"),
          absl::StrCat(e.event_time_ms(), " is ",
                       absl::FormatDuration(absl::Milliseconds(
                           e.event_time_ms() - now_ms)),
                       " ahead of server time (limit ",
                       absl::FormatDuration(limits.max_future_skew),
                       ", --max_future_skew)"));
    }
    items += e.item_ids_size() + e.item_keys_size();
    if (items > limits.max_items_per_request) {
      return Invalid("exposures",
                     absl::StrCat("more than ", limits.max_items_per_request,
                                  " items in one request "
                                  "(--max_items_per_request)"));
    }
    for (int j = 0; j < e.item_keys_size(); ++j) {
      if (absl::Status s = ValidateKey(
              absl::StrCat(prefix, ".item_keys[", j, "]"), e.item_keys(j),
              limits);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFilterRecalled(
    const exposure::v1::FilterRecalledRequest& req,
    const RequestLimits& limits) {
  if (absl::Status s = SurfaceRegistry::ValidateName(req.surface()); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateUserId("user_id", req.user_id(), limits);
      !s.ok()) {
    return s;
  }
  if (!exposure::v1::ResultMode_IsValid(req.mode())) {
    return Invalid("mode", absl::StrCat("unknown result mode ", req.mode()));
  }
  const size_t n =
      static_cast<size_t>(req.candidate_ids_size() + req.candidate_keys_size());
  if (n > limits.max_candidates_per_request) {
    return Invalid(
        "candidate_ids",
        absl::StrCat(n, " candidates (ids + keys) exceed the limit of ",
                     limits.max_candidates_per_request,
                     " (--max_candidates_per_request)"));
  }
  for (int i = 0; i < req.candidate_keys_size(); ++i) {
    if (absl::Status s = ValidateKey(absl::StrCat("candidate_keys[", i, "]"),
                                     req.candidate_keys(i), limits);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateExplain(const exposure::v1::ExplainRequest& req,
                             const RequestLimits& limits) {
  if (absl::Status s = SurfaceRegistry::ValidateName(req.surface()); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateUserId("user_id", req.user_id(), limits);
      !s.ok()) {
    return s;
  }
  const size_t n =
      static_cast<size_t>(req.item_ids_size() + req.item_keys_size());
  if (n > limits.max_candidates_per_request) {
    return Invalid("item_ids",
                   absl::StrCat(n, " items (ids + keys) exceed the limit of ",
                                limits.max_candidates_per_request,
                                " (--max_candidates_per_request)"));
  }
  for (int i = 0; i < req.item_keys_size(); ++i) {
    if (absl::Status s = ValidateKey(absl::StrCat("item_keys[", i, "]"),
                                     req.item_keys(i), limits);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTracedUserIds(
    const google::protobuf::RepeatedPtrField<std::string>& user_ids,
    const RequestLimits& limits) {
  if (user_ids.empty()) return Invalid("user_ids", "empty list");
  for (int i = 0; i < user_ids.size(); ++i) {
    if (absl::Status s = ValidateUserId(absl::StrCat("user_ids[", i, "]"),
                                        user_ids[i], limits);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace exposure_filter
