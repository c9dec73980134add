// `exposure-filter-cli health`: the standard grpc.health.v1 check. It is the
// Docker HEALTHCHECK, so its interface is frozen:
//   exposure-filter-cli health [--address=HOST:PORT] [--service=NAME]
// exits 0 iff the server answers SERVING.
#include <cstdio>

#include "grpc/health/v1/health.grpc.pb.h"
#include "src/cli/command.h"

namespace exposure_filter::cli {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

int RunHealth(const CliArgs& args) {
  if (!args.positionals().empty()) {
    return UsageError("health", "takes no arguments (use --service=NAME)");
  }
  HealthCheckRequest req;
  req.set_service(args.Get("service", ""));
  HealthCheckResponse resp;
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(args));
  std::unique_ptr<grpc::ClientContext> ctx = MakeContext(args);
  grpc::Status status = stub->Check(ctx.get(), req, &resp);
  if (!status.ok()) return ReportRpcError("health", args, status);
  const std::string name =
      HealthCheckResponse::ServingStatus_Name(resp.status());
  if (args.json()) {
    std::fputs(ToJson(resp).c_str(), stdout);
  } else {
    std::printf("%s\n", name.c_str());
  }
  return resp.status() == HealthCheckResponse::SERVING ? kExitOk
                                                       : kExitServerError;
}

}  // namespace

Command HealthCommand() {
  CommandSpec spec{
      "health", "[--address=HOST:PORT] [--service=NAME]",
      "Asks grpc.health.v1.Health/Check; exits 0 iff the answer is SERVING.",
      "Prints the serving status (SERVING, NOT_SERVING, ...). --service "
      "defaults to \"\" (the\nwhole server); exposure.v1.ExposureFilter is "
      "the API service. NOT_SERVING\n(e.g. while draining on SIGTERM) and an "
      "unknown service (NotFound) exit 1.\nUsable as a container health "
      "check:\n  HEALTHCHECK CMD exposure-filter-cli health "
      "--address=localhost:50051",
      CommonOptions()};
  spec.options.push_back(
      {"service", "NAME", "service to check (default \"\": the server)"});
  return Command{std::move(spec), RunHealth};
}

}  // namespace exposure_filter::cli
