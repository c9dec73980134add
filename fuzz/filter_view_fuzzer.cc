// libFuzzer harness for FilterView::Parse, the parser every pull-mode client
// runs on bytes from the network. Built by scripts/fuzz.sh (clang, ASan +
// UBSan); seeds are the golden vectors (fuzz/corpus/filter_view_fuzzer/):
// format 2 (<name>.bin, what the server sends: runs and legacy Bloom
// segments) and format 1 (format1_<name>.bin, the previous release's).
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
  // The tables account for every byte.
  const bool v1 = view->format_version() == 1;
  Check(v1 || view->format_version() == 2);
  size_t total = (v1 ? format::kHeaderBytes : format::kHeader2Bytes) +
                 format::kTrailerBytes;
  Check(view->slices().size() <= format::kMaxSlices);
  size_t segments = 0, runs = 0;
  for (size_t i = 0; i < view->slices().size(); ++i) {
    const FilterView::Slice& sl = view->slices()[i];
    Check(sl.start_ms < sl.end_ms);
    Check(i == 0 || view->slices()[i - 1].start_ms < sl.start_ms);
    Check(sl.first_segment == static_cast<int>(segments) &&
          sl.first_run == static_cast<int>(runs));
    Check(sl.num_segments + sl.num_runs >= 1 && sl.num_segments <= 8);
    segments += sl.num_segments;
    runs += sl.num_runs;
    if (!v1) total += format::kSlice2Bytes;
  }
  Check(segments == view->segments().size() && runs == view->runs().size());
  for (const FilterView::Segment& s : view->segments()) {
    Check(s.num_blocks >= 1 && s.num_blocks <= format::kMaxBlocksPerSegment);
    Check(s.k >= 1 && s.k <= 16 && s.start_ms < s.end_ms);
    total += (v1 ? format::kSegmentHeaderBytes : format::kSegment2Bytes) +
             size_t{s.num_blocks} * 64;
  }
  for (const FilterView::Run& r : view->runs()) {
    Check(!v1 && r.precision >= 1 && r.precision <= 32);
    Check(r.universe >= 2 && r.universe <= (uint64_t{1} << r.precision));
    Check(r.count >= 1 && r.count <= r.universe);
    total +=
        format::kRunLengthBytes + format::kRunHeaderBytes + r.payload_bytes;
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
  // The empty key is rejected, every other answered.
  const absl::string_view key = bytes.substr(0, 16);
  Check(view->MayContainKey(key).ok() != key.empty());
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
