// Mode B: the recall server pulls the user's filter (GetFilter) and checks
// candidates locally with FilterView, getting exactly FilterRecalled's
// answer. FilterCache revalidates with if_version, so a filter that did not
// change costs a tiny round trip and no bytes; candidates never leave the
// recall server.
//
//   recall_pull_local_check TARGET SURFACE USER_ID CANDIDATE_ID...
// checks the candidates twice (the second time revalidating the cached
// filter) and prints the survivors and how the filter was obtained.
#include <cstdio>
#include <vector>

#include "absl/strings/numbers.h"
#include "exposure_filter/exposure_filter_client.h"
#include "exposure_filter/filter_cache.h"

using exposure_filter::ClientOptions;
using exposure_filter::ExposureFilterClient;
using exposure_filter::FilterCache;

// What a recall server calls before ranking.
absl::StatusOr<std::vector<uint64_t>> DropExposed(
    FilterCache& cache, const std::string& surface, const std::string& user_id,
    const std::vector<uint64_t>& candidates) {
  auto filter = cache.Get(surface, user_id);
  if (!filter.ok()) return filter.status();
  std::vector<uint8_t> keep(candidates.size());
  (*filter)->view().KeepMaskIds(candidates, keep.data());
  std::vector<uint64_t> kept;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (keep[i]) kept.push_back(candidates[i]);
  }
  return kept;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TARGET SURFACE USER_ID CANDIDATE_ID...\n",
                 argv[0]);
    return 2;
  }
  std::vector<uint64_t> candidates;
  for (int i = 4; i < argc; ++i) {
    uint64_t id;
    if (!absl::SimpleAtoi(argv[i], &id)) {
      std::fprintf(stderr, "not an item id: %s\n", argv[i]);
      return 2;
    }
    candidates.push_back(id);
  }
  auto client = ExposureFilterClient::Connect(
      argv[1], grpc::InsecureChannelCredentials(), ClientOptions{});
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  FilterCache cache(client->get(), {.max_users = 10000});
  for (int round = 0; round < 2; ++round) {
    auto kept = DropExposed(cache, argv[2], argv[3], candidates);
    if (!kept.ok()) {
      std::fprintf(stderr, "%s\n", kept.status().ToString().c_str());
      return 1;
    }
    std::printf("kept:");
    for (uint64_t id : *kept) {
      std::printf(" %llu", static_cast<unsigned long long>(id));
    }
    std::printf("\n");
  }
  const auto stats = cache.stats();
  std::printf("full_pulls=%llu not_modified=%llu\n",
              static_cast<unsigned long long>(stats.full_pulls),
              static_cast<unsigned long long>(stats.not_modified));
  return 0;
}
