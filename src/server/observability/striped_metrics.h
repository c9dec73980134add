// Counters and histograms cheap enough for the request path: relaxed atomic
// adds into one of kStripes cache-line-aligned copies, picked per thread, so
// gRPC's threads do not bounce one line between cores; a scrape sums the
// stripes. (prometheus-cpp's own Histogram takes a mutex per Observe.)
#ifndef EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_STRIPED_METRICS_H_
#define EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_STRIPED_METRICS_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"

namespace exposure_filter {

// kStripes x width atomic cells; each stripe starts on its own cache line.
class StripedCells {
 public:
  static constexpr size_t kStripes = 8;

  explicit StripedCells(size_t width)
      : width_(width),
        stride_((width + kCellsPerLine - 1) / kCellsPerLine * kCellsPerLine),
        lines_(new Line[kStripes * stride_ / kCellsPerLine]) {}

  void Add(size_t cell, uint64_t n) {
    At(ThisThreadStripe() * stride_ + cell)
        .fetch_add(n, std::memory_order_relaxed);
  }
  // The sum over stripes (a scrape; not atomic across cells).
  uint64_t Sum(size_t cell) const {
    uint64_t total = 0;
    for (size_t s = 0; s < kStripes; ++s) {
      total += At(s * stride_ + cell).load(std::memory_order_relaxed);
    }
    return total;
  }
  size_t width() const { return width_; }

 private:
  static constexpr size_t kCellsPerLine = 8;  // 64-byte line / 8-byte cell
  struct alignas(64) Line {
    std::atomic<uint64_t> cells[kCellsPerLine] = {};
  };
  static size_t ThisThreadStripe() {
    static std::atomic<size_t> next{0};
    thread_local const size_t stripe =
        next.fetch_add(1, std::memory_order_relaxed) % kStripes;
    return stripe;
  }
  std::atomic<uint64_t>& At(size_t i) const {
    return lines_[i / kCellsPerLine].cells[i % kCellsPerLine];
  }

  const size_t width_;
  const size_t stride_;
  std::unique_ptr<Line[]> lines_;
};

// A histogram of integer observations (e.g. nanoseconds) with fixed upper
// bounds in the same unit; bucket i counts values <= bounds[i] and above
// bounds[i-1], the last bucket everything above the last bound.
class StripedHistogram {
 public:
  explicit StripedHistogram(std::vector<uint64_t> bounds)
      : bounds_(std::move(bounds)), cells_(bounds_.size() + 2) {}

  void Observe(uint64_t value) {
    cells_.Add(Bucket(value), 1);
    cells_.Add(SumCell(), value);
  }
  // Index of the bucket `value` falls in, for callers that batch (Merge).
  size_t Bucket(uint64_t value) const {
    return static_cast<size_t>(
        std::lower_bound(bounds_.begin(), bounds_.end(), value) -
        bounds_.begin());
  }
  // Adds per-bucket counts (size num_buckets()) and their sum at once.
  void Merge(absl::Span<const uint64_t> counts, uint64_t sum) {
    for (size_t i = 0; i < counts.size() && i < num_buckets(); ++i) {
      if (counts[i] != 0) cells_.Add(i, counts[i]);
    }
    cells_.Add(SumCell(), sum);
  }

  size_t num_buckets() const { return bounds_.size() + 1; }
  const std::vector<uint64_t>& bounds() const { return bounds_; }
  uint64_t BucketCount(size_t i) const { return cells_.Sum(i); }
  uint64_t Sum() const { return cells_.Sum(SumCell()); }

 private:
  size_t SumCell() const { return bounds_.size() + 1; }

  const std::vector<uint64_t> bounds_;
  StripedCells cells_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_OBSERVABILITY_STRIPED_METRICS_H_
