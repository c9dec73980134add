// ItemInput: the item ids/keys and user ids a subcommand reads from its
// arguments, from files, or from stdin.
//
// Items: a positional argument (or a line of --items-from) of decimal digits
// that fits 64 bits is a numeric item id (`item_ids`), anything else is a
// string key (`item_keys`). --key=K and --keys-from force the key space (for
// the key "7"), --id=N forces the id space. Files hold one value per line;
// surrounding blanks are trimmed, empty lines and lines starting with '#'
// are skipped; "-" reads stdin.
#ifndef EXPOSURE_FILTER_SRC_CLI_ITEM_INPUT_H_
#define EXPOSURE_FILTER_SRC_CLI_ITEM_INPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/cli/cli_args.h"

namespace exposure_filter::cli {

struct Items {
  std::vector<uint64_t> ids;
  std::vector<std::string> keys;
  size_t size() const { return ids.size() + keys.size(); }
};

// The options ReadItems understands, for a CommandSpec.
std::vector<OptionSpec> ItemOptions();
// InvalidArgument naming the bad value or unreadable file.
absl::StatusOr<Items> ReadItems(const CliArgs& args);

// User ids from positional arguments and --users-from.
std::vector<OptionSpec> UserListOptions();
absl::StatusOr<std::vector<std::string>> ReadUsers(const CliArgs& args);

}  // namespace exposure_filter::cli

#endif  // EXPOSURE_FILTER_SRC_CLI_ITEM_INPUT_H_
