// Mode A: the recall server sends the user's candidates to FilterRecalled and
// keeps what comes back. One round trip per feed request; the server holds
// all state. Simplest integration; the request carries every candidate.
//
//   recall_server_side_filter TARGET SURFACE USER_ID CANDIDATE_ID...
// prints the candidates the user has not seen, in order.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "exposure_filter/exposure_filter_client.h"

using exposure_filter::ClientOptions;
using exposure_filter::ExposureFilterClient;

// What a recall server calls before ranking.
absl::StatusOr<std::vector<uint64_t>> DropExposed(
    const ExposureFilterClient& client, const std::string& surface,
    const std::string& user_id, const std::vector<uint64_t>& candidates) {
  exposure::v1::FilterRecalledRequest req;
  req.set_surface(surface);
  req.set_user_id(user_id);
  req.mutable_candidate_ids()->Add(candidates.begin(), candidates.end());
  absl::StatusOr<exposure::v1::FilterRecalledResponse> resp =
      client.FilterRecalled(req);
  if (!resp.ok()) return resp.status();
  return std::vector<uint64_t>(resp->kept_ids().begin(),
                               resp->kept_ids().end());
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
  auto kept = DropExposed(**client, argv[2], argv[3], candidates);
  if (!kept.ok()) {
    // A recall server would fail open here (serve unfiltered) or retry.
    std::fprintf(stderr, "%s\n", kept.status().ToString().c_str());
    return 1;
  }
  std::printf("kept:");
  for (uint64_t id : *kept)
    std::printf(" %llu", static_cast<unsigned long long>(id));
  std::printf("\n");
  return 0;
}
