#include "tools/drill/drill_verify.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exposure_filter/exposure_filter_client.h"
#include "src/cluster/replica_ownership.h"

namespace exposure_filter::drill {
namespace {

constexpr size_t kExamplesKept = 10;

struct Pending {
  const std::string* user;
  const std::vector<uint64_t>* items;
  int32_t owner;
  uint64_t missing = 0;
  std::string error;  // non-empty: the owner did not answer
};

// Asks `client` for every item of `p`; sets p->missing / p->error.
void Check(const ExposureFilterClient& client, int max_candidates, Pending* p,
           std::vector<std::string>* examples) {
  p->missing = 0;
  p->error.clear();
  for (size_t from = 0; from < p->items->size(); from += max_candidates) {
    exposure::v1::FilterRecalledRequest request;
    request.set_user_id(*p->user);
    const size_t to =
        std::min(p->items->size(), from + static_cast<size_t>(max_candidates));
    for (size_t i = from; i < to; ++i)
      request.add_candidate_ids((*p->items)[i]);
    const auto response = client.FilterRecalled(request);
    if (!response.ok()) {
      p->error = response.status().ToString();
      return;
    }
    // Every candidate was acknowledged for this user: any survivor is an
    // acknowledged exposure this copy does not have.
    p->missing += response->kept_ids_size();
    if (response->kept_ids_size() > 0 && examples->size() < kExamplesKept) {
      examples->push_back(
          absl::StrCat("user ", *p->user, " on replica ", p->owner, ": item ",
                       response->kept_ids(0), " not filtered (",
                       response->kept_ids_size(), " of ", to - from, ")"));
    }
  }
}

}  // namespace

VerifyResult VerifyAcked(const VerifyOptions& options,
                         const std::vector<AckedExposure>& acked) {
  VerifyResult result;
  absl::flat_hash_map<std::string, std::vector<uint64_t>> by_user;
  for (const AckedExposure& e : acked) {
    std::vector<uint64_t>& items = by_user[e.user_id];
    items.insert(items.end(), e.item_ids.begin(), e.item_ids.end());
  }
  ClusterOptions cluster;
  cluster.partitions = options.partitions;
  cluster.replicas = static_cast<int32_t>(options.replica_addresses.size());
  cluster.replication_factor = options.replication_factor;
  const ReplicaOwnership placement(cluster);

  std::vector<Pending> pending;
  for (auto& [user, items] : by_user) {
    std::sort(items.begin(), items.end());
    items.erase(std::unique(items.begin(), items.end()), items.end());
    ++result.users;
    result.items += items.size();
    for (int32_t owner : placement.OwnersOfUser(user)) {
      pending.push_back({&user, &items, owner, 0, ""});
    }
  }
  result.owner_checks = pending.size();

  ClientOptions client_options;
  client_options.deadline = absl::Seconds(5);
  std::vector<std::unique_ptr<ExposureFilterClient>> clients;
  for (const std::string& address : options.replica_addresses) {
    auto c = ExposureFilterClient::Connect(
        address, grpc::InsecureChannelCredentials(), client_options);
    if (!c.ok()) {
      result.examples.push_back(c.status().ToString());
      result.unreachable = pending.size();
      return result;
    }
    clients.push_back(*std::move(c));
  }

  // Poll until every copy has every item, or the catch-up time is over:
  // only the pairs still short are asked again.
  const absl::Time start = absl::Now();
  std::vector<std::string> examples;
  while (true) {
    examples.clear();
    std::vector<Pending> short_pairs;
    for (Pending& p : pending) {
      Check(*clients[p.owner], options.max_candidates, &p, &examples);
      if (p.missing > 0 || !p.error.empty()) short_pairs.push_back(p);
    }
    pending = std::move(short_pairs);
    if (pending.empty() || absl::Now() - start > options.catch_up) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  result.waited_s = absl::ToDoubleSeconds(absl::Now() - start);
  for (const Pending& p : pending) {
    if (!p.error.empty()) {
      ++result.unreachable;
      if (examples.size() < kExamplesKept) {
        examples.push_back(absl::StrCat("user ", *p.user, " on replica ",
                                        p.owner, ": ", p.error));
      }
    }
    result.missing += p.missing;
  }
  result.examples = std::move(examples);
  return result;
}

}  // namespace exposure_filter::drill
