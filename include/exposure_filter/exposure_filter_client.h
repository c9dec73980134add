// ExposureFilterClient: a thin C++ client of the exposure.v1 API over the
// generated stub, with what every recall server otherwise re-invents:
//
//  - a deadline on every call (ClientOptions::deadline, covering all attempts);
//  - bounded retries of UNAVAILABLE with exponential backoff, done by gRPC's
//    own retry machinery (a retryPolicy in the channel's service config), not
//    by a hand-written loop; every RPC of the API is safe to repeat
//    (re-recording an item is a no-op, deleting twice deletes once);
//  - errors as absl::Status with the gRPC code and the server's message (and,
//    from a partitioned replica refusing another's user, the owner as an
//    OwnerHint payload: owner_hint.h; routing_client.h routes for you).
//
//   auto client = ExposureFilterClient::Connect("localhost:50051",
//                     grpc::InsecureChannelCredentials(), {});
//   absl::StatusOr<exposure::v1::FilterRecalledResponse> r =
//       client->FilterRecalled(request);
//
// For pull mode (GetFilter + local checks) see filter_cache.h.
// Thread-safe: one client may serve many threads.
#ifndef EXPOSURE_FILTER_EXPOSURE_FILTER_CLIENT_H_
#define EXPOSURE_FILTER_EXPOSURE_FILTER_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"

namespace exposure_filter {

struct ClientOptions {
  // Per call, across all attempts. FilterRecalled of a few thousand
  // candidates takes well under a millisecond on the server; the rest is
  // network and queueing.
  absl::Duration deadline = absl::Milliseconds(500);
  // Attempts per call (1 = no retry). gRPC caps this at 5.
  int max_attempts = 3;
  // Backoff before retry n (n >= 1) is uniform in
  // [0, min(initial_backoff * multiplier^(n-1), max_backoff)] (gRPC's jitter).
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(1);
  double backoff_multiplier = 2.0;
  // How soon the channel tries to connect again after a connection failed:
  // initial_reconnect_backoff, then x1.6 per failure up to
  // max_reconnect_backoff (gRPC's defaults are 1 s and 120 s). While it
  // waits, calls to that replica fail at once; with replication a restarted
  // replica is useless to the client until the channel tries again, and a
  // rolling restart takes its neighbour down seconds later (with gRPC's
  // defaults the failover drill saw both owners of a user unreachable, one of
  // them SERVING again for 2 s). A refused connect costs one SYN/RST per
  // second per channel.
  absl::Duration initial_reconnect_backoff = absl::Milliseconds(100);
  absl::Duration max_reconnect_backoff = absl::Seconds(1);
};

// Checks the options (positive deadline and backoffs, 1..5 attempts,
// multiplier > 0, initial <= max for both backoffs).
absl::Status ValidateClientOptions(const ClientOptions& options);

// The gRPC service config that retries UNAVAILABLE on every exposure.v1 RPC
// as `options` say; for callers that build their own channels.
std::string RetryServiceConfigJson(const ClientOptions& options);

// Channel arguments carrying RetryServiceConfigJson(options) and the
// reconnect backoff.
grpc::ChannelArguments ClientChannelArguments(const ClientOptions& options);

// A finished call's status as absl::Status (same code, the server's message)
// with the owner hint of the trailing metadata, if any, as a payload under
// kOwnerHintPayloadUrl (owner_hint.h). `context` must be the call's.
absl::Status StatusFromCall(const grpc::Status& status,
                            const grpc::ClientContext& context);

class ExposureFilterClient {
 public:
  // A channel to `target` configured with the retry policy of `options`.
  static absl::StatusOr<std::unique_ptr<ExposureFilterClient>> Connect(
      const std::string& target,
      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      const ClientOptions& options);

  // Over an existing channel, which should carry RetryServiceConfigJson (or
  // retries are whatever the channel does). `options` must be valid.
  ExposureFilterClient(std::shared_ptr<grpc::ChannelInterface> channel,
                       const ClientOptions& options);

  absl::StatusOr<exposure::v1::RecordExposureResponse> RecordExposure(
      const exposure::v1::RecordExposureRequest& request) const;
  absl::StatusOr<exposure::v1::FilterRecalledResponse> FilterRecalled(
      const exposure::v1::FilterRecalledRequest& request) const;
  absl::StatusOr<exposure::v1::GetFilterResponse> GetFilter(
      const exposure::v1::GetFilterRequest& request) const;
  absl::StatusOr<exposure::v1::GetUserStatsResponse> GetUserStats(
      const exposure::v1::GetUserStatsRequest& request) const;
  absl::StatusOr<exposure::v1::DeleteUserResponse> DeleteUser(
      const exposure::v1::DeleteUserRequest& request) const;
  absl::StatusOr<exposure::v1::GetServerStatsResponse> GetServerStats(
      const exposure::v1::GetServerStatsRequest& request) const;
  absl::StatusOr<exposure::v1::ExplainResponse> Explain(
      const exposure::v1::ExplainRequest& request) const;

  const ClientOptions& options() const { return options_; }
  // The generated stub, for callers that drive calls themselves with their
  // own contexts (routing_client.cc: per-try deadlines, hedging, cancel).
  exposure::v1::ExposureFilter::Stub* stub() const { return stub_.get(); }
  // The channel, for a session stream to the same server
  // (routing_filter_replica.h).
  const std::shared_ptr<grpc::ChannelInterface>& channel() const {
    return channel_;
  }

 private:
  template <typename Request, typename Response, typename Method>
  absl::StatusOr<Response> Call(Method method, const Request& request) const;

  std::shared_ptr<grpc::ChannelInterface> channel_;
  std::unique_ptr<exposure::v1::ExposureFilter::Stub> stub_;
  const ClientOptions options_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_EXPOSURE_FILTER_CLIENT_H_
