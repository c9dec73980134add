// `exposure-filter-cli get-filter`: GetFilter, decoded with the public
// FilterView (include/exposure_filter/filter_view.h) exactly as a recall
// server would, summarised, and optionally saved or probed locally.
#include <google/protobuf/struct.pb.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/filter_view.h"
#include "src/cli/command.h"
#include "src/cli/item_input.h"

namespace exposure_filter::cli {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

Value Num(double v) {
  Value out;
  out.set_number_value(v);
  return out;
}
Value Str(const std::string& v) {
  Value out;
  out.set_string_value(v);
  return out;
}

int RunGetFilter(const CliArgs& args) {
  std::string user;
  if (!RequireUser(args, "get-filter", &user)) return kExitUsage;
  absl::StatusOr<Items> probes = ReadItems(args);
  if (!probes.ok()) return UsageError("get-filter", probes.status().message());

  exposure::v1::GetFilterRequest req;
  req.set_surface(args.Get("surface", ""));
  req.set_user_id(user);
  req.set_if_version(args.Get("if-version", ""));
  exposure::v1::GetFilterResponse resp;
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  grpc::Status status = stub->GetFilter(MakeContext(args).get(), req, &resp);
  if (!status.ok()) return ReportRpcError("get-filter", args, status);

  Struct summary;
  auto& f = *summary.mutable_fields();
  f["version"] = Str(resp.version());
  if (resp.not_modified()) {
    f["notModified"].set_bool_value(true);
    if (args.json()) {
      std::fputs(ToJson(summary).c_str(), stdout);
    } else {
      std::printf("version %s: not modified\n", resp.version().c_str());
    }
    return kExitOk;
  }
  if (args.Has("out")) {
    const std::string path = args.Get("out", "");
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(resp.filter().data(),
              static_cast<std::streamsize>(resp.filter().size()));
    out.close();
    if (!out)
      return UsageError("get-filter",
                        absl::StrCat("--out: cannot write '", path, "'"));
  }
  absl::StatusOr<FilterView> view = FilterView::Parse(resp.filter());
  if (!view.ok()) {
    // The server sent bytes the published decoder rejects: a server bug.
    std::fprintf(stderr,
                 "exposure-filter-cli get-filter: the filter does not decode: "
                 "%s\n",
                 std::string(view.status().message()).c_str());
    return kExitServerError;
  }
  f["bytes"] = Num(static_cast<double>(resp.filter().size()));
  f["fpRateTarget"] = Num(view->fp_rate_target());
  f["estimatedFpRate"] = Num(view->EstimatedFpRate());
  f["checksum"] = Str(absl::StrFormat("%016x", view->checksum()));
  uint64_t items = 0;
  auto* segments = f["segments"].mutable_list_value();
  for (const FilterView::Segment& s : view->segments()) {
    items += s.item_count;
    Struct seg;
    auto& sf = *seg.mutable_fields();
    sf["startMs"] = Num(static_cast<double>(s.start_ms));
    sf["endMs"] = Num(static_cast<double>(s.end_ms));
    sf["items"] = Num(s.item_count);
    sf["blocks"] = Num(s.num_blocks);
    sf["k"] = Num(s.k);
    sf["level"] = Num(s.level);
    *segments->add_values()->mutable_struct_value() = std::move(seg);
  }
  f["items"] = Num(static_cast<double>(items));
  auto* checks = f["checks"].mutable_list_value();
  std::string check_text;
  auto add_check = [&](const std::string& item, bool seen) {
    Struct c;
    (*c.mutable_fields())["item"] = Str(item);
    (*c.mutable_fields())["mayBeExposed"].set_bool_value(seen);
    *checks->add_values()->mutable_struct_value() = std::move(c);
    absl::StrAppend(
        &check_text, "  ", item, "  ",
        seen ? "may be exposed (would be filtered)" : "fresh (kept)", "\n");
  };
  for (uint64_t id : probes->ids)
    add_check(absl::StrCat(id), view->MayContainId(id));
  for (const std::string& key : probes->keys) {
    add_check(absl::StrCat("key:", key), view->MayContainKey(key));
  }
  if (args.json()) {
    std::fputs(ToJson(summary).c_str(), stdout);
    return kExitOk;
  }
  std::printf("version %s, %zu bytes, checksum %s\n", resp.version().c_str(),
              resp.filter().size(), f["checksum"].string_value().c_str());
  std::printf("fp target %g, estimated fp now %.3g, %zu segments, %llu items\n",
              view->fp_rate_target(), view->EstimatedFpRate(),
              view->segments().size(), static_cast<unsigned long long>(items));
  for (const FilterView::Segment& s : view->segments()) {
    std::printf("  slice %s  level %d  %u items  %u blocks  k=%d\n",
                FormatRange(s.start_ms, s.end_ms).c_str(), s.level,
                s.item_count, s.num_blocks, s.k);
  }
  if (!check_text.empty()) std::printf("local checks:\n%s", check_text.c_str());
  return kExitOk;
}

}  // namespace

Command GetFilterCommand() {
  CommandSpec spec{
      "get-filter", "--user=ID [--surface=NAME] [--out=FILE] [ITEM...]",
      "Pulls a user's portable filter (GetFilter), decodes and summarises it.",
      "Decodes with the published FilterView, as a recall server would: "
      "version, size,\nFP target and estimate, one line per segment. ITEMs "
      "are then checked locally\nagainst the pulled filter. --out saves the "
      "raw bytes (docs/filter-format.md).",
      CommonOptions()};
  for (OptionSpec& o : UserSurfaceOptions()) spec.options.push_back(o);
  spec.options.push_back(
      {"if-version", "V", "answer 'not modified' if the filter is still V"});
  spec.options.push_back({"out", "FILE", "also write the filter bytes here"});
  for (OptionSpec& o : ItemOptions()) spec.options.push_back(o);
  return Command{std::move(spec), RunGetFilter};
}

}  // namespace exposure_filter::cli
