// `exposure-filter-cli record`: RecordExposure for one user.
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/cli/command.h"
#include "src/cli/item_input.h"

namespace exposure_filter::cli {
namespace {

// --time: Unix ms, or RFC 3339 ("2026-11-23T12:00:00Z"); 0 or absent = now.
absl::StatusOr<int64_t> ParseEventTime(const std::string& text) {
  int64_t ms = 0;
  if (absl::SimpleAtoi(text, &ms)) return ms;
  absl::Time t;
  std::string err;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    return absl::ToUnixMillis(t);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--time: '", text, "' is neither Unix ms nor RFC 3339 (", err, ")"));
}

int RunRecord(const CliArgs& args) {
  std::string user;
  if (!RequireUser(args, "record", &user)) return kExitUsage;
  absl::StatusOr<Items> items = ReadItems(args);
  if (!items.ok()) return UsageError("record", items.status().message());
  if (items->size() == 0) {
    return UsageError("record",
                      "no items (arguments, --id, --key, "
                      "--items-from or --keys-from)");
  }
  absl::StatusOr<int64_t> time = ParseEventTime(args.Get("time", "0"));
  if (!time.ok()) return UsageError("record", time.status().message());

  exposure::v1::RecordExposureRequest req;
  req.set_surface(args.Get("surface", ""));
  exposure::v1::Exposure* e = req.add_exposures();
  e->set_user_id(user);
  e->set_event_time_ms(*time);
  for (uint64_t id : items->ids) e->add_item_ids(id);
  for (const std::string& key : items->keys) e->add_item_keys(key);
  exposure::v1::RecordExposureResponse resp;
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  grpc::Status status =
      stub->RecordExposure(MakeContext(args).get(), req, &resp);
  if (!status.ok()) return ReportRpcError("record", args, status);
  if (args.json()) {
    std::fputs(ToJson(resp).c_str(), stdout);
  } else {
    std::printf("recorded %llu items, %llu expired (older than the window)\n",
                static_cast<unsigned long long>(resp.items_recorded()),
                static_cast<unsigned long long>(resp.items_expired()));
  }
  return kExitOk;
}

}  // namespace

Command RecordCommand() {
  CommandSpec spec{
      "record", "--user=ID [--surface=NAME] [--time=T] ITEM...",
      "Records that items were shown to a user (RecordExposure).",
      "ITEMs: digits = numeric item id, anything else = string key.\n"
      "--time is the event time: Unix ms or RFC 3339 (default: now).",
      CommonOptions()};
  for (OptionSpec& o : UserSurfaceOptions()) spec.options.push_back(o);
  spec.options.push_back(
      {"time", "T", "event time, Unix ms or RFC 3339 (default now)"});
  for (OptionSpec& o : ItemOptions()) spec.options.push_back(o);
  return Command{std::move(spec), RunRecord};
}

}  // namespace exposure_filter::cli
