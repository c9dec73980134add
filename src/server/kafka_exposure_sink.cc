#include "src/server/kafka_exposure_sink.h"

#include "absl/strings/str_cat.h"
#include "src/server/request_validation.h"

namespace exposure_filter {
namespace {

// A per-user record's outcome as ExposureSink's contract wants it:
// validation and ownership refusals can never succeed (a bad message); the
// rest (the log failed, recovering) are retried; ResourceExhausted (a full
// trace) passes through.
absl::Status AsLogRecordStatus(absl::Status s) {
  if (absl::IsFailedPrecondition(s)) {
    return absl::InvalidArgumentError(s.message());
  }
  return s;
}

}  // namespace

absl::Status KafkaExposureSink::Validate(
    const exposure::v1::RecordExposureRequest& message) {
  const int64_t now = store_->clock().NowMs();
  // RecordExposure rejects negative and far-future times and ignores
  // (counts) expired ones; from a stream, all three mean a broken producer
  // or a replay of ancient data, so they are bad messages of their own.
  const int64_t latest_ok =
      now + absl::ToInt64Milliseconds(limits_.max_future_skew);
  absl::StatusOr<const Surface*> surface =
      surfaces_->GetOrCreate(message.surface());
  if (!surface.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("surface: ", surface.status().message()));
  }
  for (int i = 0; i < message.exposures_size(); ++i) {
    const int64_t t = message.exposures(i).event_time_ms();
    if (t < 0 || t > latest_ok) {
      return absl::OutOfRangeError(absl::StrCat(
          "exposures[", i, "].event_time_ms: ", t,
          t < 0 ? " is negative"
                : absl::StrCat(" is more than --max_future_skew=",
                               absl::FormatDuration(limits_.max_future_skew),
                               " ahead of server time ", now)));
    }
    if (t != 0 && (*surface)->policy.EventExpired(t, now)) {
      return absl::OutOfRangeError(absl::StrCat(
          "exposures[", i, "].event_time_ms: ", t,
          " is older than the surface's retention window (now ", now, ")"));
    }
  }
  return ValidateRecordExposure(message, limits_, now);
}

absl::Status KafkaExposureSink::Record(
    const exposure::v1::RecordExposureRequest& batch) {
  exposure::v1::RecordExposureResponse response;
  return handlers_->RecordLoggedExposure(batch, &response);
}

absl::Status KafkaExposureSink::DeleteUser(
    const exposure::v1::DeleteUserRequest& request) {
  exposure::v1::DeleteUserResponse response;
  return AsLogRecordStatus(handlers_->DeleteLoggedUser(request, &response));
}

absl::Status KafkaExposureSink::TraceUser(const exposure::v1::TracedUser& user,
                                          bool traced) {
  return AsLogRecordStatus(handlers_->TraceLoggedUser(user, traced));
}

}  // namespace exposure_filter
