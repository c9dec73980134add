// Command-line flags of exposure-filter-server, each overridable by an
// environment variable EXPOSURE_FILTER_<FLAG NAME IN UPPER CASE>
// (e.g. EXPOSURE_FILTER_LISTEN=0.0.0.0:50051). Precedence: command line >
// environment > built-in default.
#ifndef EXPOSURE_FILTER_SRC_SERVER_CONFIG_SERVER_FLAGS_H_
#define EXPOSURE_FILTER_SRC_SERVER_CONFIG_SERVER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "src/server/config/server_config.h"

namespace exposure_filter {

// Applies EXPOSURE_FILTER_* variables to the flags; call before parsing the
// command line so explicit flags win. Fails on a value a flag cannot parse.
absl::Status ApplyEnvironmentOverrides();

// The configuration the parsed flags describe, validated.
absl::StatusOr<ServerConfig> ConfigFromFlags();

// The log level flag (trace, debug, info, warn, error).
std::string LogLevelFlag();

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_CONFIG_SERVER_FLAGS_H_
