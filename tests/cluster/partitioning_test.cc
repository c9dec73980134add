#include "exposure_filter/partitioning.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

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

// Replication: owner i of p is (p + i) mod N. P = 12, N = 3, R = 2 by hand:
// replica 1 is owner 0 of p = 1, 4, 7, 10 (p mod 3 == 1) and owner 1 of
// p = 0, 3, 6, 9 ((0 + 1) mod 3 == 1).
TEST(ReplicaOwnershipTest, ReplicationFactorTwoByHand) {
  EXPECT_EQ(OwnersOfPartition(2, 3, 2), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(OwnersOfPartition(7, 3, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(OwnerIndexOfReplica(1, 0, 3, 2), 1);
  EXPECT_EQ(OwnerIndexOfReplica(1, 2, 3, 2), -1);
  EXPECT_EQ(PartitionsOfReplica(1, 12, 3, 2),
            (std::vector<int32_t>{0, 1, 3, 4, 6, 7, 9, 10}));
}

TEST(ReplicaOwnershipTest, EveryPartitionHasExactlyRDistinctOwners) {
  for (int32_t replicas = 1; replicas <= 6; ++replicas) {
    for (int32_t rf = 1; rf <= replicas; ++rf) {
      std::map<int32_t, std::vector<int32_t>> owners;
      for (int32_t r = 0; r < replicas; ++r) {
        const std::vector<int32_t> owned =
            PartitionsOfReplica(r, 12, replicas, rf);
        for (int32_t p : owned) owners[p].push_back(r);
      }
      ASSERT_EQ(owners.size(), 12u) << replicas << " replicas, R " << rf;
      for (auto& [p, who] : owners) {
        // Distinct by construction of the map above; R of them, and the
        // same set OwnersOfPartition lists, owner 0 the unreplicated one.
        std::vector<int32_t> listed = OwnersOfPartition(p, replicas, rf);
        EXPECT_EQ(listed[0], ReplicaForPartition(p, replicas));
        std::sort(listed.begin(), listed.end());
        EXPECT_EQ(who, listed)
            << "partition " << p << " N " << replicas << " R " << rf;
      }
    }
  }
}

TEST(ReplicaOwnershipTest, ReplicatedUsersAreOwnedByEveryOwner) {
  const ClusterOptions base{12, 3, 0, 2};
  int owned_by[3] = {};
  for (int i = 0; i < 3000; ++i) {
    const std::string user = "user-" + std::to_string(i);
    const int32_t p = KafkaPartitionForKey(user, 12);
    int owners = 0;
    for (int32_t r = 0; r < 3; ++r) {
      ClusterOptions c = base;
      c.replica_ordinal = r;
      const ReplicaOwnership ownership(c);
      const bool owns = ownership.OwnsUser(user);
      EXPECT_EQ(owns, r == p % 3 || r == (p + 1) % 3) << user << " r " << r;
      EXPECT_EQ(ownership.OwnerOfUser(user), p % 3);
      EXPECT_EQ(ownership.OwnersOfUser(user),
                (std::vector<int32_t>{p % 3, (p + 1) % 3}));
      owners += owns;
      owned_by[r] += owns;
    }
    EXPECT_EQ(owners, 2) << user;
  }
  // R/N = 2/3 of the users each, not none and not all.
  for (int n : owned_by) {
    EXPECT_GT(n, 1800);
    EXPECT_LT(n, 2200);
  }
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
      {{-1, 1, 0}, "--partitions"},
      {{12, 0, 0}, "--replicas"},
      {{12, 3, 3}, "--replica_ordinal"},
      {{12, 3, -1}, "--replica_ordinal"},
      {{0, 2, 0}, "--partitions"},
      {{2, 3, 0}, "--replicas=3"},
      {{12, 3, 0, 0}, "--replication_factor"},
      {{12, 3, 0, 4}, "--replication_factor=4 exceeds --replicas=3"},
  };
  for (const auto& b : bad) {
    const absl::Status s = b.options.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(b.flag), absl::string_view::npos) << s;
  }
}

TEST(ClusterOptionsTest, ReplicationNeedsKafkaIngest) {
  const ClusterOptions replicated{12, 3, 0, 2};
  EXPECT_TRUE(replicated.Validate().ok());
  EXPECT_TRUE(replicated.ValidateWithIngest(/*kafka_ingest=*/true).ok());
  const absl::Status s = replicated.ValidateWithIngest(false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--replication_factor=2"), absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("--kafka_brokers"), absl::string_view::npos) << s;
  // R = 1 is today's layout: no Kafka needed.
  EXPECT_TRUE((ClusterOptions{12, 3, 0, 1}).ValidateWithIngest(false).ok());
  // An invalid layout is reported before the missing ingest.
  EXPECT_NE((ClusterOptions{12, 3, 0, 4})
                .ValidateWithIngest(false)
                .message()
                .find("exceeds --replicas"),
            absl::string_view::npos);
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
