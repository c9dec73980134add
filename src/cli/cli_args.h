// CliArgs: the command line of one exposure-filter-cli subcommand, parsed
// against the options that subcommand declares (so a misspelt option is an
// error, not silently ignored) and rendered as its --help text.
//
// Syntax: `--name=value` or `--name value` for options that take a value,
// `--name` for switches, anything else is a positional argument; `--` ends
// the options.
#ifndef EXPOSURE_FILTER_SRC_CLI_CLI_ARGS_H_
#define EXPOSURE_FILTER_SRC_CLI_CLI_ARGS_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace exposure_filter::cli {

struct OptionSpec {
  std::string name;        // without the leading "--"
  std::string value_name;  // "" for a switch
  std::string help;
  bool repeatable = false;
};

// What a subcommand accepts, for parsing and for --help.
struct CommandSpec {
  std::string name;      // "trace add"
  std::string synopsis;  // "[options] USER..."
  std::string summary;   // one line, for the command list
  std::string details;   // paragraphs after the synopsis
  std::vector<OptionSpec> options;
};

// Options every subcommand takes: --address, --deadline, --json, --help.
std::vector<OptionSpec> CommonOptions();

class CliArgs {
 public:
  // InvalidArgument naming the bad option. `args` excludes the program and
  // subcommand names.
  static absl::StatusOr<CliArgs> Parse(const CommandSpec& spec,
                                       const std::vector<std::string>& args);

  bool Has(absl::string_view name) const { return values_.contains(name); }
  // The last value of an option, or `fallback` when absent.
  std::string Get(absl::string_view name, absl::string_view fallback) const;
  // Every value of a repeatable option, in order.
  std::vector<std::string> GetAll(absl::string_view name) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

  // Common options. With --route, the --user's replica (docs/scale-out.md).
  std::string address() const;
  bool json() const { return Has("json"); }
  bool help() const { return Has("help"); }
  absl::StatusOr<absl::Duration> deadline() const;
  // --route/--partitions (commands taking --user): InvalidArgument naming
  // the option when they are inconsistent.
  absl::Status CheckRoute() const;

 private:
  absl::flat_hash_map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positionals_;
};

// The --help text of a subcommand.
std::string HelpText(const CommandSpec& spec);

}  // namespace exposure_filter::cli

#endif  // EXPOSURE_FILTER_SRC_CLI_CLI_ARGS_H_
