#include "exposure_filter/exposure_filter_client.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "exposure_filter/owner_hint.h"

namespace exposure_filter {
namespace {

using exposure::v1::ExposureFilter;

// gRPC durations in service configs are decimal seconds with an "s" suffix.
std::string ProtoDuration(absl::Duration d) {
  return absl::StrFormat("%.6fs", absl::ToDoubleSeconds(d));
}

absl::Status FromGrpc(const grpc::Status& s) {
  // grpc::StatusCode and absl::StatusCode share their numbering (both are
  // google.rpc.Code).
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

}  // namespace

absl::Status ValidateClientOptions(const ClientOptions& o) {
  if (o.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("deadline: must be positive");
  }
  // gRPC rejects a retryPolicy outside 2..5 attempts; 1 means no policy.
  if (o.max_attempts < 1 || o.max_attempts > 5) {
    return absl::InvalidArgumentError("max_attempts: must be 1..5");
  }
  if (o.initial_backoff <= absl::ZeroDuration() ||
      o.max_backoff < o.initial_backoff) {
    return absl::InvalidArgumentError(
        "initial_backoff, max_backoff: need 0 < initial <= max");
  }
  if (!(o.backoff_multiplier > 0)) {
    return absl::InvalidArgumentError("backoff_multiplier: must be > 0");
  }
  if (o.initial_reconnect_backoff <= absl::ZeroDuration() ||
      o.max_reconnect_backoff < o.initial_reconnect_backoff) {
    return absl::InvalidArgumentError(
        "initial_reconnect_backoff, max_reconnect_backoff: need 0 < initial "
        "<= max");
  }
  return absl::OkStatus();
}

std::string RetryServiceConfigJson(const ClientOptions& o) {
  if (o.max_attempts <= 1) return "{}";
  return absl::StrFormat(
      R"({"methodConfig": [{"name": [{"service": "exposure.v1.ExposureFilter"}],)"
      R"( "retryPolicy": {"maxAttempts": %d, "initialBackoff": "%s",)"
      R"( "maxBackoff": "%s", "backoffMultiplier": %.6f,)"
      R"( "retryableStatusCodes": ["UNAVAILABLE"]}}]})",
      o.max_attempts, ProtoDuration(o.initial_backoff),
      ProtoDuration(o.max_backoff), o.backoff_multiplier);
}

absl::Status StatusFromCall(const grpc::Status& s,
                            const grpc::ClientContext& context) {
  absl::Status status = FromGrpc(s);
  if (s.ok()) return status;
  // A partitioned replica names the user's owner (owner_hint.h).
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto it = trailers.find(kOwnerHintMetadataKey); it != trailers.end()) {
    status.SetPayload(
        kOwnerHintPayloadUrl,
        absl::Cord(absl::string_view(it->second.data(), it->second.size())));
  }
  return status;
}

grpc::ChannelArguments ClientChannelArguments(const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(RetryServiceConfigJson(options));
  // The service config above is the client's; ignore any a resolver offers.
  args.SetInt(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(
                  options.initial_reconnect_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(
                  absl::ToInt64Milliseconds(options.max_reconnect_backoff)));
  return args;
}

absl::StatusOr<std::unique_ptr<ExposureFilterClient>>
ExposureFilterClient::Connect(
    const std::string& target,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const ClientOptions& options) {
  if (absl::Status s = ValidateClientOptions(options); !s.ok()) return s;
  if (target.empty()) return absl::InvalidArgumentError("target: empty");
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      target, credentials, ClientChannelArguments(options));
  return std::make_unique<ExposureFilterClient>(std::move(channel), options);
}

ExposureFilterClient::ExposureFilterClient(
    std::shared_ptr<grpc::ChannelInterface> channel,
    const ClientOptions& options)
    : channel_(std::move(channel)),
      stub_(ExposureFilter::NewStub(channel_)),
      options_(options) {}

template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> ExposureFilterClient::Call(
    Method method, const Request& request) const {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.deadline));
  Response response;
  const grpc::Status s = (stub_.get()->*method)(&ctx, request, &response);
  if (!s.ok()) return StatusFromCall(s, ctx);
  return response;
}

absl::StatusOr<exposure::v1::RecordExposureResponse>
ExposureFilterClient::RecordExposure(
    const exposure::v1::RecordExposureRequest& request) const {
  return Call<exposure::v1::RecordExposureRequest,
              exposure::v1::RecordExposureResponse>(
      &ExposureFilter::Stub::RecordExposure, request);
}

absl::StatusOr<exposure::v1::FilterRecalledResponse>
ExposureFilterClient::FilterRecalled(
    const exposure::v1::FilterRecalledRequest& request) const {
  return Call<exposure::v1::FilterRecalledRequest,
              exposure::v1::FilterRecalledResponse>(
      &ExposureFilter::Stub::FilterRecalled, request);
}

absl::StatusOr<exposure::v1::GetFilterResponse> ExposureFilterClient::GetFilter(
    const exposure::v1::GetFilterRequest& request) const {
  return Call<exposure::v1::GetFilterRequest, exposure::v1::GetFilterResponse>(
      &ExposureFilter::Stub::GetFilter, request);
}

absl::StatusOr<exposure::v1::GetUserStatsResponse>
ExposureFilterClient::GetUserStats(
    const exposure::v1::GetUserStatsRequest& request) const {
  return Call<exposure::v1::GetUserStatsRequest,
              exposure::v1::GetUserStatsResponse>(
      &ExposureFilter::Stub::GetUserStats, request);
}

absl::StatusOr<exposure::v1::DeleteUserResponse>
ExposureFilterClient::DeleteUser(
    const exposure::v1::DeleteUserRequest& request) const {
  return Call<exposure::v1::DeleteUserRequest,
              exposure::v1::DeleteUserResponse>(
      &ExposureFilter::Stub::DeleteUser, request);
}

absl::StatusOr<exposure::v1::GetServerStatsResponse>
ExposureFilterClient::GetServerStats(
    const exposure::v1::GetServerStatsRequest& request) const {
  return Call<exposure::v1::GetServerStatsRequest,
              exposure::v1::GetServerStatsResponse>(
      &ExposureFilter::Stub::GetServerStats, request);
}

absl::StatusOr<exposure::v1::ExplainResponse> ExposureFilterClient::Explain(
    const exposure::v1::ExplainRequest& request) const {
  return Call<exposure::v1::ExplainRequest, exposure::v1::ExplainResponse>(
      &ExposureFilter::Stub::Explain, request);
}

}  // namespace exposure_filter
