// `exposure-filter-cli explain`: why items are filtered or kept for a user.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/cli/command.h"
#include "src/cli/item_input.h"
#include "src/cli/read_freshness.h"

namespace exposure_filter::cli {
namespace {

using exposure::v1::ItemExplanation;

const char* VerdictText(ItemExplanation::Verdict v) {
  switch (v) {
    case ItemExplanation::KEPT:
      return "kept: no live slice claims it";
    case ItemExplanation::FILTERED_RECORDED:
      return "filtered: exposed (recorded in the trace)";
    case ItemExplanation::FILTERED_FALSE_POSITIVE:
      return "filtered: FALSE POSITIVE (traced, never recorded)";
    case ItemExplanation::FILTERED_UNVERIFIED:
      return "filtered: exposed, or a false positive (not traced over "
             "these slices)";
    default:
      return "?";
  }
}

void PrintText(const exposure::v1::ExplainRequest& req,
               const exposure::v1::ExplainResponse& r) {
  std::printf("user %s on surface \"%s\": ", req.user_id().c_str(),
              req.surface().c_str());
  if (!r.user_exists()) {
    std::printf("no live history, every item is kept\n");
  } else {
    std::printf("%d live slices, estimated fp rate %.3g\n",
                r.live_slices_size(), r.estimated_fp_rate());
  }
  if (r.traced()) {
    std::printf("traced since %s, %llu trace entries dropped by the cap\n",
                FormatMs(r.traced_since_ms()).c_str(),
                static_cast<unsigned long long>(r.trace_entries_dropped()));
  } else {
    std::printf("not traced (exposure times unknown; `trace add` to start)\n");
  }
  for (const ItemExplanation& item : r.items()) {
    const std::string name = item.item_case() == ItemExplanation::kItemKey
                                 ? absl::StrCat("key:", item.item_key())
                                 : absl::StrCat(item.item_id());
    std::printf("%s  %s\n", name.c_str(), VerdictText(item.verdict()));
    for (const exposure::v1::TimeRange& t : item.claimed_by()) {
      std::printf("    claimed by slice %s\n",
                  FormatRange(t.start_ms(), t.end_ms()).c_str());
    }
    for (int64_t t : item.recorded_exposures_ms()) {
      std::printf("    exposed at %s\n", FormatMs(t).c_str());
    }
  }
}

int RunExplain(const CliArgs& args) {
  std::string user;
  if (!RequireUser(args, "explain", &user)) return kExitUsage;
  absl::StatusOr<Items> items = ReadItems(args);
  if (!items.ok()) return UsageError("explain", items.status().message());
  if (items->size() == 0) {
    return UsageError("explain", "no items to explain");
  }
  exposure::v1::ExplainRequest req;
  req.set_surface(args.Get("surface", ""));
  req.set_user_id(user);
  for (uint64_t id : items->ids) req.add_item_ids(id);
  for (const std::string& key : items->keys) req.add_item_keys(key);
  if (absl::Status s = SetReadFreshness(args, &req); !s.ok()) {
    return UsageError("explain", s.message());
  }
  exposure::v1::ExplainResponse resp;
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  grpc::Status status = stub->Explain(MakeContext(args).get(), req, &resp);
  if (!status.ok()) return ReportRpcError("explain", args, status);
  if (args.json()) {
    std::fputs(ToJson(resp).c_str(), stdout);
  } else {
    PrintText(req, resp);
    ReportStaleness(resp.staleness());
  }
  return kExitOk;
}

}  // namespace

Command ExplainCommand() {
  CommandSpec spec{
      "explain",
      "--user=ID [--surface=NAME] [--min_offsets=P:OFFSET,...] "
      "[--allow_lagging] ITEM...",
      "Why is each item filtered or kept for this user? (Explain)",
      "Per item: the verdict, the live slices whose Bloom filter claims it "
      "and, for a\ntraced user, the exact exposure times. A filtered item a "
      "traced user never saw\nis reported as a false positive.",
      CommonOptions()};
  for (OptionSpec& o : UserSurfaceOptions()) spec.options.push_back(o);
  for (OptionSpec& o : ItemOptions()) spec.options.push_back(o);
  for (OptionSpec& o : ReadFreshnessOptions()) spec.options.push_back(o);
  return Command{std::move(spec), RunExplain};
}

}  // namespace exposure_filter::cli
