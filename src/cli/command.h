// Command: one exposure-filter-cli subcommand (its spec for parsing and
// --help, and the function that runs it), plus the helpers every subcommand
// shares: the channel, the per-call deadline, printing answers and turning a
// gRPC status into a message and an exit code.
#ifndef EXPOSURE_FILTER_SRC_CLI_COMMAND_H_
#define EXPOSURE_FILTER_SRC_CLI_COMMAND_H_

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/cli/cli_args.h"
#include "src/cli/exit_codes.h"

namespace exposure_filter::cli {

struct Command {
  CommandSpec spec;
  // Runs with parsed arguments; returns the process exit code.
  std::function<int(const CliArgs&)> run;
};

// Every subcommand, in the order the top-level help lists them.
std::vector<Command> AllCommands();

// The subcommands, one factory per file.
Command HealthCommand();
Command RecordCommand();
Command FilterCommand();
Command GetFilterCommand();
Command StatsCommand();
Command ExplainCommand();
Command DeleteCommand();
Command TraceAddCommand();
Command TraceRemoveCommand();
Command TraceListCommand();

// A channel to args.address(): plaintext, or TLS with --tls_ca
// (channel_credentials.h).
std::shared_ptr<grpc::Channel> MakeChannel(const CliArgs& args);
// A context whose deadline is --deadline from now. The deadline was checked
// by PrepareCall.
std::unique_ptr<grpc::ClientContext> MakeContext(const CliArgs& args);

// Checks the common options; prints a message and returns kExitUsage on a
// bad one, or kExitOk.
int CheckCommonOptions(const CliArgs& args);

// Prints `what: <code>: <message>` to stderr and returns the exit code for a
// failed call (kExitUnreachable for UNAVAILABLE / DEADLINE_EXCEEDED, else
// kExitServerError).
int ReportRpcError(absl::string_view what, const CliArgs& args,
                   const grpc::Status& status);

// Prints a usage error and returns kExitUsage.
int UsageError(absl::string_view command, absl::string_view message);

// The message as proto3 JSON (field names in lowerCamelCase, 64-bit integers
// as strings, as grpcurl prints them), with a trailing newline.
std::string ToJson(const google::protobuf::Message& message);

// Reads the user id from --user (required); false (after printing a usage
// error) if it is missing.
bool RequireUser(const CliArgs& args, absl::string_view command,
                 std::string* user);

// --user=ID and --surface=NAME, for a CommandSpec.
std::vector<OptionSpec> UserSurfaceOptions();

// "2026-11-23T12:00:00.000Z" (UTC), or "-" for 0.
std::string FormatMs(int64_t unix_ms);
// "[start .. end)" of event time, UTC.
std::string FormatRange(int64_t start_ms, int64_t end_ms);

}  // namespace exposure_filter::cli

#endif  // EXPOSURE_FILTER_SRC_CLI_COMMAND_H_
