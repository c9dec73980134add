// libFuzzer harness for FilterView::Parse, the parser every pull-mode client
// runs on bytes from the network. Built by scripts/fuzz.sh (clang, ASan +
// UBSan); seeds are the golden vectors (fuzz/corpus/filter_view_fuzzer/).
//
// Each input is parsed twice: as is (mostly stopped by the checksum), and
// with its last 8 bytes replaced by the correct checksum, so that mutations
// reach the structural checks and the probe code behind them. Accepted views
// must be internally consistent; anything else traps.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "exposure_filter/filter_format.h"
#include "exposure_filter/filter_view.h"

namespace {

using exposure_filter::FilterView;
namespace format = exposure_filter::format;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void Exercise(absl::string_view bytes) {
  absl::StatusOr<FilterView> view = FilterView::Parse(bytes);
  if (!view.ok()) {
    Check(view.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  // The table accounts for every byte.
  size_t total = format::kHeaderBytes + format::kTrailerBytes;
  for (const FilterView::Segment& s : view->segments()) {
    Check(s.num_blocks >= 1 && s.num_blocks <= format::kMaxBlocksPerSegment);
    Check(s.k >= 1 && s.k <= 16 && s.start_ms <= s.end_ms);
    total += format::kSegmentHeaderBytes + size_t{s.num_blocks} * 64;
  }
  Check(total == bytes.size());
  // Probe the first and last block of every segment and a spread between.
  std::vector<uint64_t> hashes = {0, ~uint64_t{0}, 0xffffffff00000000ull,
                                  0x00000000ffffffffull};
  uint64_t x = bytes.size();
  for (int i = 0; i < 32; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    hashes.push_back(x);
  }
  std::vector<uint8_t> keep(hashes.size());
  view->KeepMaskHashes(hashes, keep.data());
  for (size_t i = 0; i < hashes.size(); ++i) {
    Check(keep[i] == !view->MayContainHash(hashes[i]));
  }
  const double fp = view->EstimatedFpRate();
  Check(fp >= 0 && fp <= 1);
  (void)view->MayContainKey(bytes.substr(0, 16));
  (void)view->MayContainId(x);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  Exercise(bytes);
  if (size >= format::kTrailerBytes) {
    std::string sealed(bytes);
    const size_t body = size - format::kTrailerBytes;
    const uint64_t sum = XXH3_64bits(sealed.data(), body);
    for (size_t i = 0; i < 8; ++i) {
      sealed[body + i] = static_cast<char>(sum >> (8 * i));
    }
    Exercise(sealed);
  }
  return 0;
}
