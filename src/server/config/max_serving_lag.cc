// ValidateMaxServingLag (server_config.h), in a file of its own: the server
// checks the value too, and linking server_flags.cc for it would pull in
// every flag definition, which tools (kafka_ingest_bench) define themselves.
#include "absl/strings/str_cat.h"
#include "src/server/config/server_config.h"

namespace exposure_filter {

absl::Status ValidateMaxServingLag(absl::Duration lag) {
  if (lag >= absl::ZeroDuration() && lag < absl::InfiniteDuration()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--max_serving_lag=", absl::FormatDuration(lag),
                   ": must be a finite duration >= 0 (0 turns the lag gate "
                   "off)"));
}

}  // namespace exposure_filter
