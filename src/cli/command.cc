#include "src/cli/command.h"

#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "src/cli/channel_credentials.h"

namespace exposure_filter::cli {
namespace {

// gRPC's canonical names, as grpcurl prints them.
const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "Canceled";
    case grpc::StatusCode::UNKNOWN:
      return "Unknown";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "InvalidArgument";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DeadlineExceeded";
    case grpc::StatusCode::NOT_FOUND:
      return "NotFound";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "AlreadyExists";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PermissionDenied";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "ResourceExhausted";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FailedPrecondition";
    case grpc::StatusCode::ABORTED:
      return "Aborted";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OutOfRange";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "Unimplemented";
    case grpc::StatusCode::INTERNAL:
      return "Internal";
    case grpc::StatusCode::UNAVAILABLE:
      return "Unavailable";
    case grpc::StatusCode::DATA_LOSS:
      return "DataLoss";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "Unauthenticated";
    default:
      return "Code?";
  }
}

}  // namespace

std::vector<Command> AllCommands() {
  return {HealthCommand(),    RecordCommand(),   FilterCommand(),
          GetFilterCommand(), StatsCommand(),    ExplainCommand(),
          DeleteCommand(),    TraceAddCommand(), TraceRemoveCommand(),
          TraceListCommand()};
}

std::shared_ptr<grpc::Channel> MakeChannel(const CliArgs& args) {
  grpc::ChannelArguments channel_args;
  // Filters and batches can be large; the server bounds what it accepts.
  channel_args.SetMaxReceiveMessageSize(-1);
  channel_args.SetMaxSendMessageSize(-1);
  // TLS / mutual TLS. CheckCommonOptions read the files already;
  // failing now means one changed since, and never means plaintext instead.
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFor(args);
  if (!credentials.ok()) {
    std::fprintf(stderr, "exposure-filter-cli: %s\n",
                 std::string(credentials.status().message()).c_str());
    std::exit(kExitUsage);
  }
  if (args.Has("tls_server_name")) {
    channel_args.SetSslTargetNameOverride(args.Get("tls_server_name", ""));
  }
  return grpc::CreateCustomChannel(args.address(), *credentials, channel_args);
}

std::unique_ptr<grpc::ClientContext> MakeContext(const CliArgs& args) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(*args.deadline()));
  return ctx;
}

int CheckCommonOptions(const CliArgs& args) {
  if (absl::StatusOr<absl::Duration> d = args.deadline(); !d.ok()) {
    std::fprintf(stderr, "exposure-filter-cli: %s\n",
                 std::string(d.status().message()).c_str());
    return kExitUsage;
  }
  if (absl::Status s = args.CheckRoute(); !s.ok()) {
    std::fprintf(stderr, "exposure-filter-cli: %s\n",
                 std::string(s.message()).c_str());
    return kExitUsage;
  }
  if (absl::Status s = ChannelCredentialsFor(args).status(); !s.ok()) {
    std::fprintf(stderr, "exposure-filter-cli: %s\n",
                 std::string(s.message()).c_str());
    return kExitUsage;
  }
  if (args.address().empty()) {
    std::fprintf(stderr, "exposure-filter-cli: --address: empty\n");
    return kExitUsage;
  }
  return kExitOk;
}

int ReportRpcError(absl::string_view what, const CliArgs& args,
                   const grpc::Status& status) {
  std::fprintf(stderr, "exposure-filter-cli %s: %s: %s (server %s)\n",
               std::string(what).c_str(), CodeName(status.error_code()),
               status.error_message().c_str(), args.address().c_str());
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return kExitUnreachable;
  }
  return kExitServerError;
}

int UsageError(absl::string_view command, absl::string_view message) {
  std::fprintf(stderr, "exposure-filter-cli %s: %s\n",
               std::string(command).c_str(), std::string(message).c_str());
  return kExitUsage;
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

bool RequireUser(const CliArgs& args, absl::string_view command,
                 std::string* user) {
  *user = args.Get("user", "");
  if (!args.Has("user")) {
    UsageError(command, "--user is required");
    return false;
  }
  return true;
}

std::vector<OptionSpec> UserSurfaceOptions() {
  return {{"user", "ID", "user id (required)"},
          {"surface", "NAME", "surface, e.g. homefeed (default \"\")"},
          // Scale-out: a partitioned cluster's replicas.
          {"route", "ADDR0,ADDR1,...",
           "partitioned cluster: every replica's address in ordinal order; "
           "the call goes to --user's owner (instead of --address)"},
          {"partitions", "P", "with --route: the topic's partition count"}};
}

std::string FormatMs(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string FormatRange(int64_t start_ms, int64_t end_ms) {
  return absl::StrCat("[", FormatMs(start_ms), " .. ", FormatMs(end_ms), ")");
}

}  // namespace exposure_filter::cli
