// Writes the golden vectors of the portable filter format:
//   make_golden_vectors TESTDATA_DIR [FUZZ_CORPUS_DIR]
// TESTDATA_DIR/<name>.json for every vector (format: tests/testdata/README.md)
// and, if given, FUZZ_CORPUS_DIR/<name>.bin with the raw filter bytes as
// seeds for the FilterView fuzzer. Output is deterministic; run it only when
// the format is meant to change (docs/filter-format.md, "Evolution").
#include <cstdio>
#include <fstream>
#include <string>

#include "tools/golden/golden_vectors.h"

namespace {

bool WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  if (!out) {
    std::fprintf(stderr, "make_golden_vectors: cannot write %s\n",
                 path.c_str());
    return false;
  }
  std::printf("wrote %s (%zu bytes)\n", path.c_str(), contents.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s TESTDATA_DIR [FUZZ_CORPUS_DIR]\n", argv[0]);
    return 2;
  }
  auto vectors = exposure_filter::golden::BuildGoldenVectors();
  if (!vectors.ok()) {
    std::fprintf(stderr, "make_golden_vectors: %s\n",
                 vectors.status().ToString().c_str());
    return 1;
  }
  for (const auto& v : *vectors) {
    if (!WriteFile(std::string(argv[1]) + "/" + v.name + ".json",
                   exposure_filter::golden::ToJson(v))) {
      return 1;
    }
    if (argc == 3 &&
        !WriteFile(std::string(argv[2]) + "/" + v.name + ".bin", v.filter)) {
      return 1;
    }
  }
  return 0;
}
