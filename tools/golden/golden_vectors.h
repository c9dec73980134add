// Golden test vectors of the portable filter format (docs/filter-format.md).
//
// Each vector is a filter in format 2: FilterParts built from the server's
// own pieces (legacy Bloom slices recorded by BloomSlices, fingerprint runs
// built by FingerprintRun), encoded by EncodeFilterParts, plus candidates
// with the answers the server-side structures give (every live slice's
// BloomSegment::MayContain and FingerprintRun::Contains; and
// UserFilter::MayContain, the FilterRecalled path, wherever
// UserFilter::FromParts accepts the parts). They are written to
// tests/testdata/*.json by tools/golden/make_golden_vectors and pinned by
// tests/filter/golden_vectors_test.cc, so any change that moves a bit of the
// format fails loudly; decoders in other languages test against the files.
// The format-1 vectors of the previous release stay in
// tests/testdata/format1/ as decode-only tests (no encoder writes format 1).
//
// Everything here is deterministic: fixed items, fixed times, no randomness
// beyond a seeded generator, so regenerating gives byte-identical files.
#ifndef EXPOSURE_FILTER_TOOLS_GOLDEN_GOLDEN_VECTORS_H_
#define EXPOSURE_FILTER_TOOLS_GOLDEN_GOLDEN_VECTORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace exposure_filter::golden {

struct Candidate {
  bool is_key = false;
  uint64_t id = 0;  // when !is_key
  std::string key;  // when is_key (raw bytes, UTF-8 in every vector)
  bool may_contain = false;
};

struct GoldenVector {
  std::string name;  // file stem: tests/testdata/<name>.json
  std::string description;
  std::string filter;  // the encoded bytes
  std::vector<Candidate> candidates;
};

// Builds every vector. Fails (rather than emitting a wrong file) if the
// reference decoder FilterView disagrees with the server-side structures on
// any candidate, or they disagree among themselves.
absl::StatusOr<std::vector<GoldenVector>> BuildGoldenVectors();

// The vector as the JSON text stored in tests/testdata (one field per line,
// one candidate per line, so diffs are readable).
std::string ToJson(const GoldenVector& v);

// The command that rewrites the files, for failure messages.
inline constexpr char kRegenerateCommand[] =
    "cmake --build build --target make_golden_vectors && "
    "build/tools/golden/make_golden_vectors tests/testdata "
    "fuzz/corpus/filter_view_fuzzer";

}  // namespace exposure_filter::golden

#endif  // EXPOSURE_FILTER_TOOLS_GOLDEN_GOLDEN_VECTORS_H_
