#include "tools/kafka/mock_cluster_control.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace exposure_filter {
namespace {

// Parses words[first..] as integers into `out`; false names the bad one.
bool Integers(const std::vector<absl::string_view>& words, size_t first,
              std::vector<int64_t>* out, std::string* bad) {
  for (size_t i = first; i < words.size(); ++i) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(words[i], &v)) {
      *bad = std::string(words[i]);
      return false;
    }
    out->push_back(v);
  }
  return true;
}

std::string Reply(const absl::Status& s) {
  return s.ok() ? "ok" : absl::StrCat("error: ", s.message());
}

}  // namespace

std::string RunMockClusterCommand(KafkaMockCluster& cluster,
                                  absl::string_view line) {
  const std::vector<absl::string_view> words =
      absl::StrSplit(line, ' ', absl::SkipWhitespace());
  if (words.empty()) return "error: empty command";
  std::vector<int64_t> n;
  std::string bad;
  if (words[0] == "leader") {
    if (words.size() != 4) {
      return "error: usage: leader <topic> <partition> <broker>";
    }
    if (!Integers(words, 2, &n, &bad)) {
      return absl::StrCat("error: not an integer: ", bad);
    }
    return Reply(cluster.SetPartitionLeader(
        std::string(words[1]), static_cast<int>(n[0]), static_cast<int>(n[1])));
  }
  if (words[0] == "delay") {
    if (words.size() != 5) {
      return "error: usage: delay <broker> <api_key> <count> <ms>";
    }
    if (!Integers(words, 1, &n, &bad)) {
      return absl::StrCat("error: not an integer: ", bad);
    }
    if (n[2] < 0 || n[3] < 0) return "error: count and ms must be >= 0";
    return Reply(cluster.DelayNextRequestsOn(
        static_cast<int>(n[0]), static_cast<int>(n[1]),
        static_cast<size_t>(n[2]), static_cast<int>(n[3])));
  }
  return absl::StrCat("error: unknown command \"", words[0],
                      "\" (leader, delay)");
}

}  // namespace exposure_filter
