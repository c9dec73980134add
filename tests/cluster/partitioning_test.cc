#include "exposure_filter/partitioning.h"

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "src/cluster/replica_ownership.h"

namespace exposure_filter {
namespace {

// The cases of Kafka's own UtilsTest.testMurmur2
// (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
TEST(KafkaMurmur2Test, MatchesKafkaUtilsTestVectors) {
  const std::map<std::string, int32_t> cases = {
      {"21", -973932308},
      {"foobar", -790332482},
      {"a-little-bit-long-string", -985981536},
      {"a-little-bit-longer-string", -1486304829},
      {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
      {"abc", 479470107},
  };
  for (const auto& [key, want] : cases) {
    EXPECT_EQ(KafkaMurmur2(key), want) << key;
  }
}

// librdkafka's "murmur2" partitioner is documented as Java-compatible; every
// key length (all four tail cases) and bytes >= 0x80 must agree with it.
TEST(KafkaMurmur2Test, AgreesWithLibrdkafkaPartitioner) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string key(rng() % 40, '\0');
    for (char& c : key) c = static_cast<char>(rng());
    const int32_t partitions = 1 + static_cast<int32_t>(rng() % 256);
    const int32_t theirs = rd_kafka_msg_partitioner_murmur2(
        nullptr, key.data(), key.size(), partitions, nullptr, nullptr);
    ASSERT_EQ(KafkaPartitionForKey(key, partitions), theirs)
        << "key length " << key.size() << ", " << partitions << " partitions";
  }
}

TEST(KafkaPartitionTest, SignBitIsMaskedNotNegated) {
  // murmur2("21") is negative; toPositive masks the sign bit:
  // (-973932308 & 0x7fffffff) = 1173551340, mod 7 = 3. abs() would give
  // 973932308 mod 7 = 1.
  EXPECT_EQ(KafkaPartitionForKey("21", 7), 1173551340 % 7);
  EXPECT_NE(KafkaPartitionForKey("21", 7), 973932308 % 7);
}

TEST(ReplicaOwnershipTest, EveryPartitionHasExactlyOneOwner) {
  for (int32_t replicas = 1; replicas <= 5; ++replicas) {
    std::map<int32_t, int> owners;
    for (int32_t r = 0; r < replicas; ++r) {
      for (int32_t p : PartitionsOfReplica(r, 12, replicas)) {
        EXPECT_EQ(ReplicaForPartition(p, replicas), r);
        ++owners[p];
      }
    }
    ASSERT_EQ(owners.size(), 12u) << replicas << " replicas";
    for (const auto& [p, n] : owners) EXPECT_EQ(n, 1) << "partition " << p;
  }
}

TEST(ReplicaOwnershipTest, UsersAreOwnedByTheirPartitionsOwner) {
  ReplicaOwnership r1(ClusterOptions{12, 3, 1});
  ASSERT_EQ(r1.OwnedPartitions(), (std::vector<int32_t>{1, 4, 7, 10}));
  int owned = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string user = "user-" + std::to_string(i);
    const int32_t p = r1.PartitionOfUser(user);
    EXPECT_EQ(p, KafkaPartitionForKey(user, 12));
    EXPECT_EQ(r1.OwnerOfUser(user), p % 3);
    EXPECT_EQ(r1.OwnsUser(user), p % 3 == 1);
    owned += r1.OwnsUser(user);
  }
  // About a third of the users, not none and not all.
  EXPECT_GT(owned, 800);
  EXPECT_LT(owned, 1200);
}

TEST(ReplicaOwnershipTest, UnpartitionedOwnsEveryone) {
  ReplicaOwnership solo(ClusterOptions{});
  EXPECT_FALSE(solo.partitioned());
  EXPECT_TRUE(solo.OwnsUser("anyone"));
  EXPECT_EQ(solo.PartitionOfUser("anyone"), -1);
  EXPECT_TRUE(solo.OwnedPartitions().empty());
}

TEST(ClusterOptionsTest, ValidateNamesTheFlag) {
  EXPECT_TRUE(ClusterOptions{}.Validate().ok());
  EXPECT_TRUE((ClusterOptions{12, 3, 2}).Validate().ok());
  const struct {
    ClusterOptions options;
    const char* flag;
  } bad[] = {
      {{-1, 1, 0}, "--partitions"},      {{12, 0, 0}, "--replicas"},
      {{12, 3, 3}, "--replica_ordinal"}, {{12, 3, -1}, "--replica_ordinal"},
      {{0, 2, 0}, "--partitions"},       {{2, 3, 0}, "--replicas=3"},
  };
  for (const auto& b : bad) {
    const absl::Status s = b.options.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(b.flag), absl::string_view::npos) << s;
  }
}

TEST(OrdinalFromHostnameTest, ParsesStatefulSetNames) {
  EXPECT_EQ(*OrdinalFromHostname("exposure-filter-0"), 0);
  EXPECT_EQ(*OrdinalFromHostname("exposure-filter-12"), 12);
  for (const char* bad : {"exposure-filter", "exposure-filter-", "host-1a", "",
                          "host-+1", "host-1-"}) {
    EXPECT_FALSE(OrdinalFromHostname(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace exposure_filter
