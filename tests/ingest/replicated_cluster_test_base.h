// The shared fixture of the replication tests: librdkafka's mock
// cluster with one topic, and N = 3 real servers in-process, P = 6, R = 2,
// each with its own data dir. replicated_ingest_test.cc (placement),
// replicated_writes_test.cc (writes through the log) and
// replicated_reads_test.cc (lag-gated reads) and lagging_reads_test.cc
// (least-stale reads) use it.
#ifndef EXPOSURE_FILTER_TESTS_INGEST_REPLICATED_CLUSTER_TEST_BASE_H_
#define EXPOSURE_FILTER_TESTS_INGEST_REPLICATED_CLUSTER_TEST_BASE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "exposure/v1/exposure_filter.grpc.pb.h"
#include "exposure_filter/partitioning.h"
#include "gtest/gtest.h"
#include "src/server/exposure_filter_server.h"
#include "src/store/clock.h"
#include "tools/kafka/kafka_mock_cluster.h"

namespace exposure_filter {

inline constexpr int32_t kPartitions = 6;
inline constexpr int32_t kReplicas = 3;
inline constexpr int32_t kReplication = 2;
inline constexpr char kTopic[] = "exposures";
inline constexpr char kGroup[] = "ha-group";
// Generous: sanitizer builds on a loaded machine are slow.
inline constexpr absl::Duration kPatience = absl::Seconds(60);

// Polls `pred` every 20 ms until it holds or kPatience passed.
template <typename Pred>
bool WaitFor(Pred pred) {
  const absl::Time deadline = absl::Now() + kPatience;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return pred();
}

// A deadline for one RPC of a test (as generous as kPatience's reasons).
inline std::chrono::system_clock::time_point RpcDeadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(30);
}

// The first user "<prefix><i>" whose owners are exactly replicas a and b.
inline std::string UserOwnedBy(absl::string_view prefix, int32_t a, int32_t b) {
  for (int i = 0;; ++i) {
    std::string u = absl::StrCat(prefix, i);
    std::vector<int32_t> o =
        OwnersOfUser(u, kPartitions, kReplicas, kReplication);
    if ((o[0] == a && o[1] == b) || (o[0] == b && o[1] == a)) return u;
  }
}

class ReplicatedClusterTest : public ::testing::Test {
 protected:
  // Starts the mock cluster and creates the topic (kPartitions).
  void SetUp() override;
  void TearDown() override;

  // Replica `ordinal`'s configuration (format: binary Exposure messages).
  ServerConfig Config(int32_t ordinal);
  // Starts the kReplicas servers with Config(r) (as edited by `edit`, if
  // set) and a stub for each, and waits until each serves reads (caught up
  // with the log).
  void StartAll();
  // FilterRecalled of `item` for `user` on replica r: its status, and in
  // *removed whether the item was filtered (the copy holds the exposure).
  grpc::Status Recall(int32_t r, const std::string& user, uint64_t item,
                      bool* removed);
  // Committed offsets of `group`, -1 where none.
  std::vector<int64_t> GroupOffsets(const std::string& group);

  // Mock brokers SetUp starts (set it before SetUp runs).
  int brokers_ = 1;
  SystemClock clock_;
  std::unique_ptr<KafkaMockCluster> cluster_;
  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<ExposureFilterServer>> servers_;
  std::vector<std::unique_ptr<exposure::v1::ExposureFilter::Stub>> stubs_;
  // Applied to every Config() by StartAll (tests change the format, ...).
  std::function<void(ServerConfig*)> edit_config_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TESTS_INGEST_REPLICATED_CLUSTER_TEST_BASE_H_
