#include "src/cli/item_input.h"

#include <fstream>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace exposure_filter::cli {
namespace {

// Appends the values of `path` ("-" = stdin), one per line.
absl::Status ReadLines(absl::string_view option, const std::string& path,
                       std::vector<std::string>* out) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path);
    if (!file) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", option, ": cannot read '", path, "'"));
    }
    in = &file;
  }
  std::string line;
  while (std::getline(*in, line)) {
    absl::string_view v = absl::StripAsciiWhitespace(line);
    if (v.empty() || v[0] == '#') continue;
    out->emplace_back(v);
  }
  if (in->bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", option, ": error reading '", path, "'"));
  }
  return absl::OkStatus();
}

bool IsNumericId(const std::string& s, uint64_t* id) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(s, id);
}

void AddAuto(const std::string& v, Items* items) {
  uint64_t id;
  if (IsNumericId(v, &id)) {
    items->ids.push_back(id);
  } else {
    items->keys.push_back(v);
  }
}

}  // namespace

std::vector<OptionSpec> ItemOptions() {
  return {
      {"id", "N", "a numeric item id", true},
      {"key", "KEY", "a string item key (even if it looks numeric)", true},
      {"items-from", "FILE",
       "items, one per line (digits = id, else key); - = stdin", true},
      {"keys-from", "FILE", "string keys, one per line; - = stdin", true},
  };
}

absl::StatusOr<Items> ReadItems(const CliArgs& args) {
  Items items;
  for (const std::string& v : args.positionals()) AddAuto(v, &items);
  for (const std::string& v : args.GetAll("id")) {
    uint64_t id;
    if (!IsNumericId(v, &id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--id: '", v, "' is not an unsigned 64-bit decimal number"));
    }
    items.ids.push_back(id);
  }
  for (const std::string& v : args.GetAll("key")) items.keys.push_back(v);
  for (const std::string& path : args.GetAll("items-from")) {
    std::vector<std::string> lines;
    if (absl::Status s = ReadLines("items-from", path, &lines); !s.ok()) {
      return s;
    }
    for (const std::string& v : lines) AddAuto(v, &items);
  }
  for (const std::string& path : args.GetAll("keys-from")) {
    if (absl::Status s = ReadLines("keys-from", path, &items.keys); !s.ok()) {
      return s;
    }
  }
  return items;
}

std::vector<OptionSpec> UserListOptions() {
  return {{"users-from", "FILE", "user ids, one per line; - = stdin", true}};
}

absl::StatusOr<std::vector<std::string>> ReadUsers(const CliArgs& args) {
  std::vector<std::string> users = args.positionals();
  for (const std::string& path : args.GetAll("users-from")) {
    if (absl::Status s = ReadLines("users-from", path, &users); !s.ok()) {
      return s;
    }
  }
  if (users.empty()) {
    return absl::InvalidArgumentError(
        "no user ids (give them as arguments or with --users-from)");
  }
  return users;
}

}  // namespace exposure_filter::cli
