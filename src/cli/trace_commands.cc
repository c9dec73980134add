// `exposure-filter-cli trace add|remove|list`: the traced-user admin RPCs.
#include <cstdio>

#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/cli/command.h"
#include "src/cli/item_input.h"

namespace exposure_filter::cli {
namespace {

template <typename Request>
bool FillUsers(const CliArgs& args, const char* command, Request* req) {
  absl::StatusOr<std::vector<std::string>> users = ReadUsers(args);
  if (!users.ok()) {
    UsageError(command, users.status().message());
    return false;
  }
  for (std::string& u : *users) req->add_user_ids(std::move(u));
  return true;
}

int RunTraceAdd(const CliArgs& args) {
  exposure::v1::AddTracedUsersRequest req;
  if (!FillUsers(args, "trace add", &req)) return kExitUsage;
  exposure::v1::AddTracedUsersResponse resp;
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  grpc::Status status =
      stub->AddTracedUsers(MakeContext(args).get(), req, &resp);
  if (!status.ok()) return ReportRpcError("trace add", args, status);
  if (args.json()) {
    std::fputs(ToJson(resp).c_str(), stdout);
  } else {
    std::printf("now tracing %u new users (%u traced in all)\n", resp.added(),
                resp.traced());
  }
  return kExitOk;
}

int RunTraceRemove(const CliArgs& args) {
  exposure::v1::RemoveTracedUsersRequest req;
  if (!FillUsers(args, "trace remove", &req)) return kExitUsage;
  exposure::v1::RemoveTracedUsersResponse resp;
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  grpc::Status status =
      stub->RemoveTracedUsers(MakeContext(args).get(), req, &resp);
  if (!status.ok()) return ReportRpcError("trace remove", args, status);
  if (args.json()) {
    std::fputs(ToJson(resp).c_str(), stdout);
  } else {
    std::printf("stopped tracing %u users (%u traced in all)\n", resp.removed(),
                resp.traced());
  }
  return kExitOk;
}

int RunTraceList(const CliArgs& args) {
  if (!args.positionals().empty()) {
    return UsageError("trace list", "takes no arguments");
  }
  exposure::v1::ListTracedUsersResponse resp;
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  grpc::Status status = stub->ListTracedUsers(
      MakeContext(args).get(), exposure::v1::ListTracedUsersRequest(), &resp);
  if (!status.ok()) return ReportRpcError("trace list", args, status);
  if (args.json()) {
    std::fputs(ToJson(resp).c_str(), stdout);
    return kExitOk;
  }
  std::printf("%d traced users (at most %u, %u entries each)\n",
              resp.users_size(), resp.max_users(), resp.max_entries_per_user());
  for (const exposure::v1::TracedUser& u : resp.users()) {
    std::printf("  %s  since %s  %llu entries  %llu dropped  %llu bytes\n",
                u.user_id().c_str(), FormatMs(u.traced_since_ms()).c_str(),
                static_cast<unsigned long long>(u.entries()),
                static_cast<unsigned long long>(u.entries_dropped()),
                static_cast<unsigned long long>(u.bytes()));
  }
  return kExitOk;
}

CommandSpec UserListSpec(const char* name, const char* summary,
                         const char* details) {
  CommandSpec spec{name, "[options] USER...", summary, details,
                   CommonOptions()};
  for (OptionSpec& o : UserListOptions()) spec.options.push_back(o);
  return spec;
}

}  // namespace

Command TraceAddCommand() {
  return Command{
      UserListSpec("trace add",
                   "Starts tracing users: keep their exposures exactly.",
                   "From now on every exposure of these users is also kept "
                   "as (item, time, surface)\nfor the retention window, for "
                   "`explain`. Bounded by the server's --trace_max_users\n"
                   "(ResourceExhausted past it; nothing is added)."),
      RunTraceAdd};
}

Command TraceRemoveCommand() {
  return Command{
      UserListSpec("trace remove",
                   "Stops tracing users and drops their entries.", ""),
      RunTraceRemove};
}

Command TraceListCommand() {
  CommandSpec spec{"trace list", "",
                   "Lists traced users with their entry counts and memory.", "",
                   CommonOptions()};
  return Command{std::move(spec), RunTraceList};
}

}  // namespace exposure_filter::cli
