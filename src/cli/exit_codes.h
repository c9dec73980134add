// Exit codes of exposure-filter-cli. Scripts (and the Docker HEALTHCHECK)
// rely on them, so they are part of the CLI's interface: never renumber.
#ifndef EXPOSURE_FILTER_SRC_CLI_EXIT_CODES_H_
#define EXPOSURE_FILTER_SRC_CLI_EXIT_CODES_H_

namespace exposure_filter::cli {

enum ExitCode : int {
  kExitOk = 0,
  // The server answered with an error status (INVALID_ARGUMENT,
  // RESOURCE_EXHAUSTED, ...), or `health` got an answer other than SERVING.
  kExitServerError = 1,
  // Bad command line or unreadable input file; nothing was sent.
  kExitUsage = 2,
  // No answer: server unreachable (UNAVAILABLE) or --deadline exceeded.
  kExitUnreachable = 3,
};

}  // namespace exposure_filter::cli

#endif  // EXPOSURE_FILTER_SRC_CLI_EXIT_CODES_H_
