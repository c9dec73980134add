// Pins the portable filter format to tests/testdata/*.json, as RocksDB's
// schema tests pin its filter bits: the vectors are rebuilt from the real
// encoder and server-side filter and must match the checked-in files byte for
// byte, bytes and answers alike. A failure means the format moved; if that is
// intended, bump the format version (docs/filter-format.md, "Evolution") and
// regenerate the files with the command in the failure message.
#include "tools/golden/golden_vectors.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "exposure_filter/filter_view.h"
#include "gtest/gtest.h"

namespace exposure_filter::golden {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TestdataPath(const std::string& name) {
  return absl::StrCat(EF_TESTDATA_DIR, "/", name, ".json");
}

std::string Regenerate() {
  return absl::StrCat(
      "\nThe portable filter format changed. If that is intended, bump the "
      "format version (docs/filter-format.md, \"Evolution\") and regenerate "
      "the golden vectors:\n  ",
      kRegenerateCommand, "\n");
}

// The value of the line `  "<field>": ...` in our fixed JSON layout.
std::string FieldLine(const std::string& json, const std::string& field) {
  const std::string tag = absl::StrCat("\n  \"", field, "\": ");
  const size_t at = json.find(tag);
  if (at == std::string::npos) return "";
  const size_t start = at + tag.size();
  return json.substr(start, json.find('\n', start) - start);
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// The vectors are built once per process (the largest takes a while) but
// checked in every test's SetUp: a failed build fails each test with its
// status. (An ASSERT in SetUpTestSuite would not: gtest reports the suite's
// tests as skipped.)
const absl::StatusOr<std::vector<GoldenVector>>& BuiltVectors() {
  static const auto* const built =
      new absl::StatusOr<std::vector<GoldenVector>>(BuildGoldenVectors());
  return *built;
}

class GoldenVectorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::StatusOr<std::vector<GoldenVector>>& built = BuiltVectors();
    ASSERT_TRUE(built.ok())
        << "the golden vectors could not be rebuilt from the encoder and "
           "the server-side filter: "
        << built.status();
    vectors_ = &*built;
  }
  const std::vector<GoldenVector>* vectors_ = nullptr;
};

TEST_F(GoldenVectorsTest, FilterBytesMatchTheCheckedInVectors) {
  for (const GoldenVector& v : *vectors_) {
    const std::string file = ReadFile(TestdataPath(v.name));
    ASSERT_FALSE(file.empty())
        << TestdataPath(v.name) << " missing" << Regenerate();
    const std::string json = ToJson(v);
    EXPECT_EQ(FieldLine(file, "filter_hex"), FieldLine(json, "filter_hex"))
        << v.name << ": encoded bytes differ" << Regenerate();
    EXPECT_EQ(FieldLine(file, "version"), FieldLine(json, "version"))
        << v.name << ": version (checksum) differs" << Regenerate();
  }
}

TEST_F(GoldenVectorsTest, AnswersAndWholeFilesMatchTheCheckedInVectors) {
  for (const GoldenVector& v : *vectors_) {
    const std::string file = ReadFile(TestdataPath(v.name));
    const std::string json = ToJson(v);
    const size_t file_at = file.find("\"candidates\"");
    const size_t json_at = json.find("\"candidates\"");
    ASSERT_NE(file_at, std::string::npos) << v.name << Regenerate();
    EXPECT_EQ(file.substr(file_at), json.substr(json_at))
        << v.name << ": candidates or expected answers differ" << Regenerate();
    EXPECT_EQ(file, json) << v.name << ": file differs" << Regenerate();
  }
}

// The checked-in files alone, read as a foreign decoder would: FilterView on
// the stored bytes gives every stored answer.
TEST_F(GoldenVectorsTest, FilterViewPassesTheFilesAsStored) {
  int checked = 0;
  for (const GoldenVector& v : *vectors_) {
    std::ifstream in(TestdataPath(v.name));
    const std::string file = ReadFile(TestdataPath(v.name));
    std::string hex = FieldLine(file, "filter_hex");
    ASSERT_GE(hex.size(), 3u) << v.name;
    hex = hex.substr(1, hex.size() - 3);   // strip the quotes and comma
    const std::string bytes = Unhex(hex);  // the view points into these
    absl::StatusOr<FilterView> view = FilterView::Parse(bytes);
    ASSERT_TRUE(view.ok()) << v.name << ": " << view.status();
    std::string line;
    while (std::getline(in, line)) {
      const bool expected = absl::StrContains(line, "\"may_contain\": true");
      if (absl::StartsWith(line, "    {\"id\": \"")) {
        uint64_t id;
        const size_t start = 12;
        ASSERT_TRUE(absl::SimpleAtoi(
            line.substr(start, line.find('"', start) - start), &id))
            << line;
        EXPECT_EQ(view->MayContainId(id), expected) << v.name << " " << line;
        ++checked;
      } else if (absl::StartsWith(line, "    {\"key\": \"")) {
        // Keys in the vectors need no JSON escapes.
        const size_t start = 13;
        const std::string key =
            line.substr(start, line.find("\", \"may_contain\"") - start);
        ASSERT_FALSE(absl::StrContains(key, "\\")) << line;
        EXPECT_EQ(view->MayContainKey(key), expected) << v.name << " " << line;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 3000);
}

// The vectors cover what the issue asks for: some answers true, some false,
// and the maximum segment count.
TEST_F(GoldenVectorsTest, VectorsCoverBothAnswersAndTheMaximumGeometry) {
  size_t max_segments = 0;
  int present = 0, absent = 0;
  for (const GoldenVector& v : *vectors_) {
    max_segments =
        std::max(max_segments, FilterView::Parse(v.filter)->segments().size());
    for (const Candidate& c : v.candidates)
      (c.may_contain ? present : absent)++;
  }
  EXPECT_EQ(max_segments, 64u);
  EXPECT_GT(present, 1000);
  EXPECT_GT(absent, 1000);
}

}  // namespace
}  // namespace exposure_filter::golden
