// `exposure-filter-cli filter`: FilterRecalled for one user.
#include <cstdio>

#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/cli/command.h"
#include "src/cli/item_input.h"
#include "src/cli/read_freshness.h"

namespace exposure_filter::cli {
namespace {

int RunFilter(const CliArgs& args) {
  std::string user;
  if (!RequireUser(args, "filter", &user)) return kExitUsage;
  absl::StatusOr<Items> items = ReadItems(args);
  if (!items.ok()) return UsageError("filter", items.status().message());

  exposure::v1::FilterRecalledRequest req;
  req.set_surface(args.Get("surface", ""));
  req.set_user_id(user);
  for (uint64_t id : items->ids) req.add_candidate_ids(id);
  for (const std::string& key : items->keys) req.add_candidate_keys(key);
  if (args.Has("mask")) req.set_mode(exposure::v1::KEEP_MASK);
  if (absl::Status s = SetReadFreshness(args, &req); !s.ok()) {
    return UsageError("filter", s.message());
  }
  exposure::v1::FilterRecalledResponse resp;
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  grpc::Status status =
      stub->FilterRecalled(MakeContext(args).get(), req, &resp);
  if (!status.ok()) return ReportRpcError("filter", args, status);
  if (args.json()) {
    std::fputs(ToJson(resp).c_str(), stdout);
    return kExitOk;
  }
  // Survivors on stdout, one per line, so the output pipes into other tools;
  // the count goes to stderr.
  if (req.mode() == exposure::v1::KEEP_MASK) {
    std::string bits;
    const size_t n = items->size();
    for (size_t i = 0; i < n; ++i) {
      bits.push_back((resp.keep_mask()[i / 8] >> (i % 8)) & 1 ? '1' : '0');
    }
    std::printf("%s\n", bits.c_str());
  } else {
    for (uint64_t id : resp.kept_ids()) {
      std::printf("%llu\n", static_cast<unsigned long long>(id));
    }
    for (const std::string& key : resp.kept_keys()) {
      std::printf("%s\n", key.c_str());
    }
  }
  std::fprintf(stderr, "removed %u of %zu candidates\n", resp.removed_count(),
               items->size());
  ReportStaleness(resp.staleness());
  return kExitOk;
}

}  // namespace

Command FilterCommand() {
  CommandSpec spec{
      "filter",
      "--user=ID [--surface=NAME] [--mask] [--min_offsets=P:OFFSET,...] "
      "[--allow_lagging] ITEM...",
      "Removes the items the user was shown (FilterRecalled).",
      "Prints the surviving candidates one per line (ids first, then keys), "
      "or with\n--mask one 0/1 character per candidate (1 = kept); the "
      "removed count goes to stderr.",
      CommonOptions()};
  for (OptionSpec& o : UserSurfaceOptions()) spec.options.push_back(o);
  spec.options.push_back({"mask", "", "ask for the KEEP_MASK result mode"});
  for (OptionSpec& o : ItemOptions()) spec.options.push_back(o);
  for (OptionSpec& o : ReadFreshnessOptions()) spec.options.push_back(o);
  return Command{std::move(spec), RunFilter};
}

}  // namespace exposure_filter::cli
