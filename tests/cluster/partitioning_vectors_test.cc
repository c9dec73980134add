// tests/testdata/partitioning/murmur2_vectors.tsv: 960 keys (every tail
// length, random bytes, UTF-8, the empty key) with their murmur2 and
// partitions. This test pins them to the C++ partitioner and to librdkafka's
// murmur2 partitioner; the Python client's test
// (clients/python/tests/test_partitioning.py) checks the same file, so all
// three agree.
#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "exposure_filter/partitioning.h"
#include "gtest/gtest.h"

namespace exposure_filter {
namespace {

std::string FromHex(const std::string& hex) {
  if (hex == "-") return "";
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(PartitioningVectorsTest, CppAndLibrdkafkaAgreeWithTheSharedVectors) {
  std::ifstream in(std::string(EF_TESTDATA_DIR) +
                   "/partitioning/murmur2_vectors.tsv");
  ASSERT_TRUE(in.good());
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = absl::StrSplit(line, '\t');
    ASSERT_EQ(f.size(), 4u) << line;
    const std::string key = FromHex(f[0]);
    int32_t murmur = 0, p12 = 0, p1000 = 0;
    ASSERT_TRUE(absl::SimpleAtoi(f[1], &murmur) &&
                absl::SimpleAtoi(f[2], &p12) && absl::SimpleAtoi(f[3], &p1000));
    EXPECT_EQ(KafkaMurmur2(key), murmur) << f[0];
    EXPECT_EQ(KafkaPartitionForKey(key, 12), p12) << f[0];
    EXPECT_EQ(KafkaPartitionForKey(key, 1000), p1000) << f[0];
    EXPECT_EQ(rd_kafka_msg_partitioner_murmur2(nullptr, key.data(), key.size(),
                                               1000, nullptr, nullptr),
              p1000)
        << f[0];
    ++checked;
  }
  EXPECT_EQ(checked, 960);
}

std::vector<int32_t> Ints(const std::string& csv) {
  std::vector<int32_t> out;
  if (csv == "-") return out;
  for (absl::string_view part : absl::StrSplit(csv, ',')) {
    int32_t v = 0;
    EXPECT_TRUE(absl::SimpleAtoi(part, &v)) << csv;
    out.push_back(v);
  }
  return out;
}

// tests/testdata/partitioning/placement_vectors.tsv: the owners of every
// partition and the partitions of every replica for P in {1, 7, 12, 16},
// every N <= min(P, 5) and R <= N. The Python client's test checks
// the same file.
TEST(PartitioningVectorsTest, PlacementAgreesWithTheSharedVectors) {
  std::ifstream in(std::string(EF_TESTDATA_DIR) +
                   "/partitioning/placement_vectors.tsv");
  ASSERT_TRUE(in.good());
  std::string line;
  int owners_checked = 0, owned_checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = absl::StrSplit(line, '\t');
    std::vector<int32_t> n(f.size() - 2);
    for (size_t i = 1; i + 1 < f.size(); ++i) {
      ASSERT_TRUE(absl::SimpleAtoi(f[i], &n[i - 1])) << line;
    }
    if (f[0] == "owners") {
      ASSERT_EQ(f.size(), 5u) << line;
      const std::vector<int32_t> want = Ints(f[4]);
      EXPECT_EQ(OwnersOfPartition(n[2], n[0], n[1]), want) << line;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(OwnerIndexOfReplica(want[i], n[2], n[0], n[1]),
                  static_cast<int32_t>(i))
            << line;
      }
      ++owners_checked;
    } else {
      ASSERT_EQ(f[0], "owned") << line;
      ASSERT_EQ(f.size(), 6u) << line;
      EXPECT_EQ(PartitionsOfReplica(n[3], n[0], n[1], n[2]), Ints(f[5]))
          << line;
      ++owned_checked;
    }
  }
  EXPECT_EQ(owners_checked, 526);
  EXPECT_EQ(owned_checked, 166);
}

}  // namespace
}  // namespace exposure_filter
