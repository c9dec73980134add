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
#include "src/cli/read_freshness.h"

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
  if (absl::Status s = SetReadFreshness(args, &req); !s.ok()) {
    return UsageError("get-filter", s.message());
  }
  exposure::v1::GetFilterResponse resp;
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  grpc::Status status = stub->GetFilter(MakeContext(args).get(), req, &resp);
  if (!status.ok()) return ReportRpcError("get-filter", args, status);
  // stderr in both modes: --json prints a summary, not the response.
  ReportStaleness(resp.staleness());

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
  // Items: format 2 counts a run's distinct fingerprints exactly and
  // carries no count for legacy Bloom segments; format 1 carries the
  // segments' item_count (inserts the slice did not already claim).
  f["formatVersion"] = Num(view->format_version());
  uint64_t items = 0;
  auto* slices = f["slices"].mutable_list_value();
  std::string slice_text;
  for (const FilterView::Slice& sl : view->slices()) {
    Struct slice;
    auto& sf = *slice.mutable_fields();
    sf["startMs"] = Num(static_cast<double>(sl.start_ms));
    sf["endMs"] = Num(static_cast<double>(sl.end_ms));
    const std::string range = FormatRange(sl.start_ms, sl.end_ms);
    auto* runs = sf["runs"].mutable_list_value();
    for (int r = 0; r < sl.num_runs; ++r) {
      const FilterView::Run& run = view->runs()[sl.first_run + r];
      items += run.count;
      Struct rs;
      auto& rf = *rs.mutable_fields();
      rf["items"] = Num(run.count);
      rf["precision"] = Num(run.precision);
      rf["universe"] = Num(static_cast<double>(run.universe));
      rf["riceK"] = Num(run.rice_k);
      rf["bytes"] = Num(run.payload_bytes);
      *runs->add_values()->mutable_struct_value() = std::move(rs);
      absl::StrAppendFormat(&slice_text,
                            "  slice %s  run  %u items  b=%d U=%u k=%d  %u "
                            "bytes\n",
                            range, run.count, run.precision, run.universe,
                            run.rice_k, run.payload_bytes);
    }
    auto* segments = sf["bloomSegments"].mutable_list_value();
    for (int g = 0; g < sl.num_segments; ++g) {
      const FilterView::Segment& s = view->segments()[sl.first_segment + g];
      Struct seg;
      auto& gf = *seg.mutable_fields();
      gf["blocks"] = Num(s.num_blocks);
      gf["k"] = Num(s.k);
      gf["level"] = Num(s.level);
      if (view->format_version() == 1) {
        items += s.item_count;
        gf["items"] = Num(s.item_count);
      }
      *segments->add_values()->mutable_struct_value() = std::move(seg);
      absl::StrAppendFormat(
          &slice_text, "  slice %s  Bloom level %d  %s%u blocks  k=%d\n", range,
          s.level,
          view->format_version() == 1 ? absl::StrCat(s.item_count, " items  ")
                                      : "",
          s.num_blocks, s.k);
    }
    *slices->add_values()->mutable_struct_value() = std::move(slice);
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
    // The empty key is not an item: rejected, as the server rejects it.
    absl::StatusOr<bool> seen = view->MayContainKey(key);
    if (!seen.ok()) return UsageError("get-filter", seen.status().message());
    add_check(absl::StrCat("key:", key), *seen);
  }
  if (args.json()) {
    std::fputs(ToJson(summary).c_str(), stdout);
    return kExitOk;
  }
  std::printf("version %s, %zu bytes, checksum %s, format %d\n",
              resp.version().c_str(), resp.filter().size(),
              f["checksum"].string_value().c_str(), view->format_version());
  std::printf(
      "fp target %g, estimated fp now %.3g, %zu slices: %zu runs, %zu legacy "
      "Bloom segments, %llu items%s\n",
      view->fp_rate_target(), view->EstimatedFpRate(), view->slices().size(),
      view->runs().size(), view->segments().size(),
      static_cast<unsigned long long>(items),
      view->format_version() == 1 || view->segments().empty()
          ? ""
          : " in runs (legacy segments carry no count)");
  std::fputs(slice_text.c_str(), stdout);
  if (!check_text.empty()) std::printf("local checks:\n%s", check_text.c_str());
  return kExitOk;
}

}  // namespace

Command GetFilterCommand() {
  CommandSpec spec{
      "get-filter",
      "--user=ID [--surface=NAME] [--out=FILE] [--min_offsets=P:OFFSET,...] "
      "[--allow_lagging] [ITEM...]",
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
  for (OptionSpec& o : ReadFreshnessOptions()) spec.options.push_back(o);
  return Command{std::move(spec), RunGetFilter};
}

}  // namespace exposure_filter::cli
