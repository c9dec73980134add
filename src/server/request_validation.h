// Validation of every RPC's input. Each check returns InvalidArgument with a
// message that starts with the offending field's path, e.g.
// "exposures[3].item_keys[0]: empty". Validation happens before any state is
// touched, so a rejected request changes nothing.
#ifndef EXPOSURE_FILTER_SRC_SERVER_REQUEST_VALIDATION_H_
#define EXPOSURE_FILTER_SRC_SERVER_REQUEST_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "src/server/config/server_config.h"

namespace exposure_filter {

absl::Status ValidateUserId(absl::string_view field, absl::string_view user_id,
                            const RequestLimits& limits);

absl::Status ValidateRecordExposure(
    const exposure::v1::RecordExposureRequest& req, const RequestLimits& limits,
    int64_t now_ms);

absl::Status ValidateFilterRecalled(
    const exposure::v1::FilterRecalledRequest& req,
    const RequestLimits& limits);

// Debugging RPCs.
absl::Status ValidateExplain(const exposure::v1::ExplainRequest& req,
                             const RequestLimits& limits);
// AddTracedUsers / RemoveTracedUsers: a non-empty list of valid user ids.
absl::Status ValidateTracedUserIds(
    const google::protobuf::RepeatedPtrField<std::string>& user_ids,
    const RequestLimits& limits);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_REQUEST_VALIDATION_H_
