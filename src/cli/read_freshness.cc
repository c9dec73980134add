#include "src/cli/read_freshness.h"

#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace exposure_filter::cli {

std::vector<OptionSpec> ReadFreshnessOptions() {
  return {{"min_offsets", "P:OFFSET,...",
           "read-your-writes: answer only from a copy that applied these "
           "Kafka offsets (a write's written_offsets)",
           /*repeatable=*/true},
          {"allow_lagging", "",
           "a last try: a copy lagging past its --max_serving_lag answers "
           "anyway, saying how stale"}};
}

absl::StatusOr<std::map<int32_t, int64_t>> ParseMinOffsets(
    const CliArgs& args) {
  std::map<int32_t, int64_t> out;
  for (const std::string& value : args.GetAll("min_offsets")) {
    for (absl::string_view entry :
         absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      const std::vector<absl::string_view> parts =
          absl::StrSplit(entry, absl::MaxSplits(':', 1));
      int32_t partition = -1;
      int64_t offset = -1;
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &partition) ||
          !absl::SimpleAtoi(parts[1], &offset) || partition < 0 || offset < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--min_offsets: \"", entry,
            "\" is not PARTITION:OFFSET (two integers >= 0, e.g. 3:41)"));
      }
      if (!out.emplace(partition, offset).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--min_offsets: partition ", partition, " given more than once"));
      }
    }
  }
  return out;
}

void ReportStaleness(const exposure::v1::ReadStaleness& staleness) {
  if (!staleness.lagging()) return;
  std::fprintf(stderr,
               "answered by a lagging copy (allow_lagging): partition %d, "
               "lag at least %lld ms\n",
               staleness.partition(),
               static_cast<long long>(staleness.lag_ms()));
}

}  // namespace exposure_filter::cli
