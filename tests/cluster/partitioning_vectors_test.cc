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

}  // namespace
}  // namespace exposure_filter
