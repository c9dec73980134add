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

// Checks one stored vector as a foreign decoder would: FilterView on the
// stored bytes gives every stored answer, one by one and in a batch.
// Returns how many candidates it checked.
int CheckStoredVector(const std::string& path, int format_version) {
  std::ifstream in(path);
  const std::string file = ReadFile(path);
  std::string hex = FieldLine(file, "filter_hex");
  EXPECT_GE(hex.size(), 3u) << path;
  if (hex.size() < 3) return 0;
  hex = hex.substr(1, hex.size() - 3);   // strip the quotes and comma
  const std::string bytes = Unhex(hex);  // the view points into these
  absl::StatusOr<FilterView> view = FilterView::Parse(bytes);
  EXPECT_TRUE(view.ok()) << path << ": " << view.status();
  if (!view.ok()) return 0;
  EXPECT_EQ(view->format_version(), format_version) << path;
  EXPECT_EQ(FieldLine(file, "format_version"),
            absl::StrCat(format_version, ","))
      << path;
  int checked = 0;
  std::vector<uint64_t> ids;
  std::vector<uint8_t> expected_keep;
  {
    const std::string v = path;
    std::string line;
    while (std::getline(in, line)) {
      const bool expected = absl::StrContains(line, "\"may_contain\": true");
      if (absl::StartsWith(line, "    {\"id\": \"")) {
        uint64_t id;
        const size_t start = 12;
        EXPECT_TRUE(absl::SimpleAtoi(
            line.substr(start, line.find('"', start) - start), &id))
            << line;
        EXPECT_EQ(view->MayContainId(id), expected) << v << " " << line;
        ids.push_back(id);
        expected_keep.push_back(!expected);
        ++checked;
      } else if (absl::StartsWith(line, "    {\"key\": \"")) {
        // Keys in the vectors need no JSON escapes.
        const size_t start = 13;
        const std::string key =
            line.substr(start, line.find("\", \"may_contain\"") - start);
        EXPECT_FALSE(absl::StrContains(key, "\\")) << line;
        const absl::StatusOr<bool> got = view->MayContainKey(key);
        EXPECT_TRUE(got.ok()) << v << " " << line << ": " << got.status();
        EXPECT_EQ(got.value_or(!expected), expected) << v << " " << line;
        ++checked;
      }
    }
  }
  std::vector<uint8_t> keep(ids.size());
  view->KeepMaskIds(ids, keep.data());
  EXPECT_EQ(keep, expected_keep) << path << ": batch mask";
  return checked;
}

const char* const kFormat2Vectors[] = {
    "empty",       "tiny",         "multi_slice", "mixed",
    "string_keys", "max_geometry", "run_extremes"};
const char* const kFormat1Vectors[] = {"empty", "tiny", "multi_slice",
                                       "string_keys", "max_geometry"};

TEST_F(GoldenVectorsTest, TheBuiltVectorsAreTheFormat2Files) {
  std::vector<std::string> names;
  for (const GoldenVector& v : *vectors_) names.push_back(v.name);
  EXPECT_EQ(names, std::vector<std::string>(std::begin(kFormat2Vectors),
                                            std::end(kFormat2Vectors)));
}

// The checked-in format-2 files alone, read as a foreign decoder would.
TEST_F(GoldenVectorsTest, FilterViewPassesTheFormat2FilesAsStored) {
  int checked = 0;
  for (const char* name : kFormat2Vectors) {
    checked += CheckStoredVector(TestdataPath(name), 2);
  }
  EXPECT_GT(checked, 7000);
}

// The previous release's vectors (tests/testdata/format1, written by its
// encoder and no longer regenerated): a client may hold a cached format-1
// filter, and FilterView still answers it exactly.
TEST(GoldenVectorsFormat1Test, FilterViewPassesTheFormat1FilesAsStored) {
  int checked = 0;
  for (const char* name : kFormat1Vectors) {
    checked += CheckStoredVector(
        absl::StrCat(EF_TESTDATA_DIR, "/format1/", name, ".json"), 1);
  }
  EXPECT_GT(checked, 3000);
}

// The vectors cover what an independent decoder must get right: some
// answers true, some false, and the maximum segment count.
TEST_F(GoldenVectorsTest, VectorsCoverBothAnswersAndTheMaximumGeometry) {
  size_t max_slices = 0, max_segments = 0, max_runs_per_slice = 0;
  uint64_t max_universe = 0;
  int min_precision = 32, min_rice_k = 31, max_rice_k = 0;
  bool mixed_slice = false;
  int present = 0, absent = 0;
  for (const GoldenVector& v : *vectors_) {
    const FilterView view = *FilterView::Parse(v.filter);
    max_slices = std::max(max_slices, view.slices().size());
    max_segments = std::max(max_segments, view.segments().size());
    for (const FilterView::Slice& s : view.slices()) {
      max_runs_per_slice =
          std::max(max_runs_per_slice, static_cast<size_t>(s.num_runs));
      mixed_slice |= s.num_runs > 0 && s.num_segments > 0;
    }
    for (const FilterView::Run& r : view.runs()) {
      max_universe = std::max(max_universe, r.universe);
      min_precision = std::min(min_precision, r.precision);
      min_rice_k = std::min(min_rice_k, r.rice_k);
      max_rice_k = std::max(max_rice_k, r.rice_k);
    }
    for (const Candidate& c : v.candidates)
      (c.may_contain ? present : absent)++;
  }
  EXPECT_EQ(max_slices, 8u);
  EXPECT_EQ(max_segments, 34u);  // 4 slices x 8 + 2
  EXPECT_EQ(max_runs_per_slice, 255u);
  EXPECT_EQ(max_universe, uint64_t{1} << 32);
  EXPECT_EQ(min_precision, 1);
  EXPECT_EQ(min_rice_k, 0);
  EXPECT_GE(max_rice_k, 29);
  EXPECT_TRUE(mixed_slice);
  EXPECT_GT(present, 1000);
  EXPECT_GT(absent, 1000);
}

}  // namespace
}  // namespace exposure_filter::golden
