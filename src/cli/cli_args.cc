#include "src/cli/cli_args.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "exposure_filter/partitioning.h"
#include "src/cli/channel_credentials.h"

namespace exposure_filter::cli {
namespace {

constexpr char kDefaultAddress[] = "localhost:50051";
constexpr char kDefaultDeadline[] = "5s";

const OptionSpec* FindOption(const CommandSpec& spec, absl::string_view name) {
  for (const OptionSpec& o : spec.options) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

}  // namespace

std::vector<OptionSpec> CommonOptions() {
  std::vector<OptionSpec> options = {
      {"address", "HOST:PORT",
       absl::StrCat("server address (default ", kDefaultAddress,
                    ", or $EXPOSURE_FILTER_ADDRESS)")},
      {"deadline", "DURATION",
       absl::StrCat("give up after this long, e.g. 500ms, 2s (default ",
                    kDefaultDeadline, ")")},
      {"json", "", "print the answer as JSON (proto3 JSON mapping)"},
      {"help", "", "show this help and exit"},
  };
  // TLS and mutual TLS (channel_credentials.h).
  for (OptionSpec& tls : TlsOptions()) options.push_back(std::move(tls));
  return options;
}

absl::StatusOr<CliArgs> CliArgs::Parse(const CommandSpec& spec,
                                       const std::vector<std::string>& args) {
  CliArgs out;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (options_done || !absl::StartsWith(arg, "--")) {
      out.positionals_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name =
        arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const OptionSpec* opt = FindOption(spec, name);
    if (opt == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown option --", name, " for '", spec.name, "' (see --help)"));
    }
    std::string value;
    if (opt->value_name.empty()) {
      if (eq != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("option --", name, " takes no value"));
      }
    } else if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size() && !absl::StartsWith(args[i + 1], "--")) {
      // "--user --json" is a forgotten value, not the user "--json".
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "option --", name, " needs a value (", opt->value_name, ")"));
    }
    std::vector<std::string>& slot = out.values_[name];
    if (!slot.empty() && !opt->repeatable && !opt->value_name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("option --", name, " given more than once"));
    }
    slot.push_back(std::move(value));
  }
  return out;
}

std::string CliArgs::Get(absl::string_view name,
                         absl::string_view fallback) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return std::string(fallback);
  return it->second.back();
}

std::vector<std::string> CliArgs::GetAll(absl::string_view name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>() : it->second;
}

std::string CliArgs::address() const {
  // Scale-out: --route picks the --user's owner (the routing
  // algorithm of docs/scale-out.md); CheckRoute() validated the options.
  if (Has("route") && Has("user")) {
    const std::vector<std::string> replicas =
        absl::StrSplit(Get("route", ""), ',');
    int32_t partitions = 0;
    if (absl::SimpleAtoi(Get("partitions", ""), &partitions) &&
        partitions > 0 && !replicas.empty() &&
        replicas.size() <= static_cast<size_t>(partitions)) {
      const std::string user = Get("user", "");
      return replicas[ReplicaForUser(user, partitions,
                                     static_cast<int32_t>(replicas.size()))];
    }
  }
  const char* env = std::getenv("EXPOSURE_FILTER_ADDRESS");
  return Get("address", env != nullptr && *env != '\0' ? env : kDefaultAddress);
}

absl::Status CliArgs::CheckRoute() const {
  if (!Has("route")) {
    if (Has("partitions")) {
      return absl::InvalidArgumentError("--partitions needs --route");
    }
    return absl::OkStatus();
  }
  if (Has("address")) {
    return absl::InvalidArgumentError(
        "--route and --address exclude each other");
  }
  const std::vector<std::string> replicas =
      absl::StrSplit(Get("route", ""), ',');
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (replicas[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--route: address ", i, " is empty"));
    }
  }
  int32_t partitions = 0;
  if (!absl::SimpleAtoi(Get("partitions", ""), &partitions) || partitions < 1) {
    return absl::InvalidArgumentError(
        "--route needs --partitions=P, the topic's partition count (>= 1)");
  }
  if (replicas.size() > static_cast<size_t>(partitions)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--route: ", replicas.size(),
                     " replicas exceed --partitions=", partitions));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> CliArgs::deadline() const {
  const std::string text = Get("deadline", kDefaultDeadline);
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d <= absl::ZeroDuration() ||
      d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--deadline: '", text,
                     "' is not a positive duration like 2s or 500ms"));
  }
  return d;
}

std::string HelpText(const CommandSpec& spec) {
  std::string out = absl::StrCat("Usage: exposure-filter-cli ", spec.name,
                                 spec.synopsis.empty() ? "" : " ",
                                 spec.synopsis, "\n\n", spec.summary, "\n");
  if (!spec.details.empty()) absl::StrAppend(&out, "\n", spec.details, "\n");
  absl::StrAppend(&out, "\nOptions:\n");
  for (const OptionSpec& o : spec.options) {
    std::string left = absl::StrCat("  --", o.name);
    if (!o.value_name.empty()) absl::StrAppend(&left, "=", o.value_name);
    if (left.size() < 26)
      left.resize(26, ' ');
    else
      absl::StrAppend(&left, "\n", std::string(26, ' '));
    absl::StrAppend(&out, left, o.help, o.repeatable ? " (repeatable)" : "",
                    "\n");
  }
  absl::StrAppend(&out,
                  "\nExit codes: 0 ok; 1 the server answered with an error "
                  "(or not SERVING);\n2 bad command line or input; 3 server "
                  "unreachable or deadline exceeded.\n");
  return out;
}

}  // namespace exposure_filter::cli
