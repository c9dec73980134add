// exposure-filter-cli: a command-line client of exposure-filter for engineers
// (and the container health check). `exposure-filter-cli --help` lists the
// subcommands; `exposure-filter-cli SUBCOMMAND --help` explains one.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/cli/command.h"

namespace exposure_filter::cli {
namespace {

void PrintTopLevelHelp(FILE* out, const std::vector<Command>& commands) {
  std::fprintf(out,
               "Usage: exposure-filter-cli SUBCOMMAND [options] [args]\n\n"
               "A command-line client of the exposure-filter gRPC service.\n\n"
               "Subcommands:\n");
  for (const Command& c : commands) {
    std::fprintf(out, "  %-13s %s\n", c.spec.name.c_str(),
                 c.spec.summary.c_str());
  }
  std::fprintf(out,
               "\nCommon options: --address=HOST:PORT (default "
               "localhost:50051), --deadline=DURATION\n(default 5s), --json, "
               "--help. `exposure-filter-cli SUBCOMMAND --help` for more.\n"
               "Exit codes: 0 ok; 1 the server answered with an error (or not "
               "SERVING);\n2 bad command line or input; 3 server unreachable "
               "or deadline exceeded.\n");
}

int Main(int argc, char** argv) {
  const std::vector<Command> commands = AllCommands();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    PrintTopLevelHelp(stderr, commands);
    return kExitUsage;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    PrintTopLevelHelp(stdout, commands);
    return kExitOk;
  }
  // Two-word subcommands ("trace add") match before their first word.
  const Command* chosen = nullptr;
  size_t consumed = 0;
  for (const Command& c : commands) {
    const size_t space = c.spec.name.find(' ');
    if (space == std::string::npos) {
      if (args[0] == c.spec.name) chosen = &c, consumed = 1;
    } else if (args.size() >= 2 && args[0] == c.spec.name.substr(0, space) &&
               args[1] == c.spec.name.substr(space + 1)) {
      chosen = &c, consumed = 2;
    }
    if (chosen != nullptr) break;
  }
  if (chosen == nullptr) {
    std::vector<std::string> names;
    for (const Command& c : commands) names.push_back(c.spec.name);
    std::string word = args[0];
    if (args.size() >= 2 && word == "trace")
      word = absl::StrCat("trace ", args[1]);
    std::fprintf(stderr,
                 "exposure-filter-cli: unknown subcommand '%s'; one of: %s\n",
                 word.c_str(), absl::StrJoin(names, ", ").c_str());
    return kExitUsage;
  }
  args.erase(args.begin(), args.begin() + consumed);
  absl::StatusOr<CliArgs> parsed = CliArgs::Parse(chosen->spec, args);
  if (!parsed.ok()) {
    return UsageError(chosen->spec.name, parsed.status().message());
  }
  if (parsed->help()) {
    std::fputs(HelpText(chosen->spec).c_str(), stdout);
    return kExitOk;
  }
  if (int rc = CheckCommonOptions(*parsed); rc != kExitOk) return rc;
  return chosen->run(*parsed);
}

}  // namespace
}  // namespace exposure_filter::cli

int main(int argc, char** argv) {
  return exposure_filter::cli::Main(argc, argv);
}
