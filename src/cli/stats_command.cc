// `exposure-filter-cli stats`: GetUserStats with --user, else GetServerStats.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "src/cli/command.h"
#include "src/cli/read_freshness.h"

namespace exposure_filter::cli {
namespace {

void PrintUserStats(const std::string& user,
                    const exposure::v1::GetUserStatsResponse& r) {
  if (!r.exists()) {
    std::printf("user %s: no live history\n", user.c_str());
    return;
  }
  std::printf(
      "user %s: %llu items, %llu bytes, %u slices, %u runs, %u Bloom "
      "segments, estimated fp %.3g\n",
      user.c_str(), static_cast<unsigned long long>(r.items()),
      static_cast<unsigned long long>(r.bytes()), r.slices(), r.runs(),
      r.bloom_segments(), r.estimated_fp_rate());
  std::printf("exposures %s .. %s, oldest slice expires %s\n",
              FormatMs(r.oldest_exposure_ms()).c_str(),
              FormatMs(r.newest_exposure_ms()).c_str(),
              FormatMs(r.expires_at_ms()).c_str());
  for (const exposure::v1::SliceStats& s : r.slice_stats()) {
    std::printf(
        "  slice %s  %llu/%llu items  %llu bytes  %u runs  %u Bloom segments  "
        "fp %.3g\n",
        FormatRange(s.start_ms(), s.end_ms()).c_str(),
        static_cast<unsigned long long>(s.items()),
        static_cast<unsigned long long>(s.capacity()),
        static_cast<unsigned long long>(s.bytes()), s.runs(),
        s.bloom_segments(), s.estimated_fp_rate());
  }
}

void PrintServerStats(const exposure::v1::GetServerStatsResponse& r) {
  std::printf("%llu users, %llu bytes, %u shards, up %.1f s\n",
              static_cast<unsigned long long>(r.users()),
              static_cast<unsigned long long>(r.bytes()), r.shards(),
              r.uptime_ms() / 1000.0);
  std::printf(
      "since start: %llu items recorded, %llu expired, %llu candidates "
      "checked, %llu removed\n",
      static_cast<unsigned long long>(r.items_recorded()),
      static_cast<unsigned long long>(r.items_expired()),
      static_cast<unsigned long long>(r.candidates_checked()),
      static_cast<unsigned long long>(r.candidates_removed()));
  // Scale-out: which partitions this replica owns.
  if (r.partitions() > 0) {
    std::string owned;
    for (uint32_t p : r.owned_partitions()) {
      absl::StrAppend(&owned, owned.empty() ? "" : ",", p);
    }
    // The replication factor only when there are copies, so an
    // unreplicated cluster prints what it always did.
    const std::string copies =
        r.replication_factor() > 1
            ? absl::StrCat(", replication factor ", r.replication_factor())
            : "";
    std::printf(
        "replica %u of %u, partitions %u%s: owns [%s]; %llu unowned users "
        "dropped at startup\n",
        r.replica_ordinal(), r.replicas(), r.partitions(), copies.c_str(),
        owned.c_str(),
        static_cast<unsigned long long>(r.unowned_users_dropped()));
  } else {
    std::printf("not partitioned: owns every user\n");
  }
  for (const exposure::v1::SurfaceStats& s : r.surface_stats()) {
    std::printf(
        "  surface \"%s\": %llu users, %llu bytes, fp target %g, "
        "retention %lld s, slice %lld s\n",
        s.surface().c_str(), static_cast<unsigned long long>(s.users()),
        static_cast<unsigned long long>(s.bytes()), s.false_positive_rate(),
        static_cast<long long>(s.retention_ms() / 1000),
        static_cast<long long>(s.slice_span_ms() / 1000));
  }
}

int RunStats(const CliArgs& args) {
  if (!args.positionals().empty()) {
    return UsageError("stats", "takes no arguments (use --user=ID)");
  }
  auto stub = exposure::v1::ExposureFilter::NewStub(MakeChannel(args));
  if (args.Has("user")) {
    exposure::v1::GetUserStatsRequest req;
    req.set_surface(args.Get("surface", ""));
    req.set_user_id(args.Get("user", ""));
    if (absl::Status s = SetReadFreshness(args, &req); !s.ok()) {
      return UsageError("stats", s.message());
    }
    exposure::v1::GetUserStatsResponse resp;
    grpc::Status status =
        stub->GetUserStats(MakeContext(args).get(), req, &resp);
    if (!status.ok()) return ReportRpcError("stats", args, status);
    if (args.json()) {
      std::fputs(ToJson(resp).c_str(), stdout);
    } else {
      PrintUserStats(req.user_id(), resp);
      ReportStaleness(resp.staleness());
    }
    return kExitOk;
  }
  if (args.Has("surface")) {
    return UsageError("stats",
                      "--surface needs --user (server stats cover "
                      "every surface)");
  }
  for (const char* read_only : {"min_offsets", "allow_lagging"}) {
    if (args.Has(read_only)) {
      return UsageError("stats", absl::StrCat("--", read_only,
                                              " needs --user (server stats "
                                              "are not a gated read)"));
    }
  }
  exposure::v1::GetServerStatsResponse resp;
  grpc::Status status = stub->GetServerStats(
      MakeContext(args).get(), exposure::v1::GetServerStatsRequest(), &resp);
  if (!status.ok()) return ReportRpcError("stats", args, status);
  if (args.json()) {
    std::fputs(ToJson(resp).c_str(), stdout);
  } else {
    PrintServerStats(resp);
  }
  return kExitOk;
}

}  // namespace

Command StatsCommand() {
  CommandSpec spec{"stats",
                   "[--user=ID [--surface=NAME] [--min_offsets=P:OFFSET,...] "
                   "[--allow_lagging]]",
                   "One user's filter stats (GetUserStats), or the server's.",
                   "Without --user: server-wide counters and per-surface "
                   "usage (GetServerStats).",
                   CommonOptions()};
  spec.options.push_back({"user", "ID", "user id (default: server stats)"});
  spec.options.push_back(
      {"surface", "NAME", "surface, e.g. homefeed (default \"\")"});
  for (OptionSpec& o : ReadFreshnessOptions()) spec.options.push_back(o);
  return Command{std::move(spec), RunStats};
}

}  // namespace exposure_filter::cli
