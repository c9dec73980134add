// The read commands' freshness options (filter, get-filter, stats --user,
// explain), the request fields of docs/scale-out.md "Consistency":
//   --min_offsets=P:OFFSET[,P:OFFSET...]  read-your-writes: served only by
//       a copy that applied each listed offset (a write's written_offsets);
//   --allow_lagging  a last try: a copy lagging past --max_serving_lag
//       answers anyway and says how stale.
// A replicated server's answer carries its staleness; the text output
// names it on stderr when the answering copy was lagging, so a script
// piping stdout is not disturbed.
#ifndef EXPOSURE_FILTER_SRC_CLI_READ_FRESHNESS_H_
#define EXPOSURE_FILTER_SRC_CLI_READ_FRESHNESS_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "src/cli/cli_args.h"

namespace exposure_filter::cli {

std::vector<OptionSpec> ReadFreshnessOptions();

// --min_offsets as partition -> offset; InvalidArgument naming the option
// and the entry that is not PARTITION:OFFSET (both >= 0, each partition
// once). Empty when the option is absent.
absl::StatusOr<std::map<int32_t, int64_t>> ParseMinOffsets(const CliArgs& args);

// Sets the request's min_offsets and allow_lagging from the options.
template <typename Request>
absl::Status SetReadFreshness(const CliArgs& args, Request* req) {
  absl::StatusOr<std::map<int32_t, int64_t>> min = ParseMinOffsets(args);
  if (!min.ok()) return min.status();
  for (const auto& [partition, offset] : *min) {
    (*req->mutable_min_offsets())[partition] = offset;
  }
  req->set_allow_lagging(args.Has("allow_lagging"));
  return absl::OkStatus();
}

// One stderr line when `staleness` says a lagging copy answered.
void ReportStaleness(const exposure::v1::ReadStaleness& staleness);

}  // namespace exposure_filter::cli

#endif  // EXPOSURE_FILTER_SRC_CLI_READ_FRESHNESS_H_
