// `exposure-filter-cli delete`: DeleteUser.
#include <cstdio>

#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/cli/command.h"

namespace exposure_filter::cli {
namespace {

int RunDelete(const CliArgs& args) {
  std::string user;
  if (!RequireUser(args, "delete", &user)) return kExitUsage;
  if (!args.positionals().empty()) {
    return UsageError("delete", "takes no arguments besides --user");
  }
  exposure::v1::DeleteUserRequest req;
  req.set_surface(args.Get("surface", ""));
  req.set_user_id(user);
  exposure::v1::DeleteUserResponse resp;
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  grpc::Status status = stub->DeleteUser(MakeContext(args).get(), req, &resp);
  if (!status.ok()) return ReportRpcError("delete", args, status);
  if (args.json()) {
    std::fputs(ToJson(resp).c_str(), stdout);
  } else {
    std::printf("%s\n", resp.existed() ? "deleted" : "no such user");
  }
  return kExitOk;
}

}  // namespace

Command DeleteCommand() {
  CommandSpec spec{"delete", "--user=ID [--surface=NAME]",
                   "Forgets a user's history on a surface (DeleteUser).",
                   "Also drops the user's trace entries on that surface "
                   "(tracing continues).",
                   CommonOptions()};
  for (OptionSpec& o : UserSurfaceOptions()) spec.options.push_back(o);
  return Command{std::move(spec), RunDelete};
}

}  // namespace exposure_filter::cli
