#include "src/filter/bloom_segment.h"

#include <cmath>
#include <cstring>
#include <new>

#include "src/filter/bloom_math.h"

namespace exposure_filter {
namespace {

uint64_t* AllocateBlocks(uint32_t num_blocks) {
  const size_t bytes = size_t{num_blocks} * kBlockBytes;
  auto* p = static_cast<uint64_t*>(
      ::operator new (bytes, std::align_val_t{kBlockBytes}));
  std::memset(p, 0, bytes);
  return p;
}

}  // namespace

void BloomSegment::AlignedFree::operator()(uint64_t* p) const {
  ::operator delete (p, std::align_val_t{kBlockBytes});
}

BloomSegment::BloomSegment(uint32_t num_blocks, int k, uint64_t capacity)
    : words_(AllocateBlocks(num_blocks)),
      num_blocks_(num_blocks),
      k_(k),
      capacity_(capacity) {}

BloomSegment::BloomSegment(const BloomSegment& other)
    : words_(AllocateBlocks(other.num_blocks_)),
      num_blocks_(other.num_blocks_),
      k_(other.k_),
      count_(other.count_),
      capacity_(other.capacity_) {
  std::memcpy(words_.get(), other.words_.get(), other.bit_bytes());
}

double BloomSegment::EstimatedFpRate() const {
  return BlockedFpRate(static_cast<double>(count_) / num_blocks_, k_);
}

namespace {

// OR of blocks [first, first + factor) of `words`, as set-bit count.
int FoldedPopcount(const uint64_t* words, size_t first, uint32_t factor) {
  int bits = 0;
  for (uint32_t w = 0; w < kBlockWords; ++w) {
    uint64_t v = 0;
    for (uint32_t b = 0; b < factor; ++b) {
      v |= words[(first + b) * kBlockWords + w];
    }
    bits += __builtin_popcountll(v);
  }
  return bits;
}

}  // namespace

double BloomSegment::FoldedFpRate(uint32_t factor) const {
  const uint32_t folded = num_blocks_ / factor;
  double sum = 0;
  for (uint32_t i = 0; i < folded; ++i) {
    const double fill =
        FoldedPopcount(words_.get(), size_t{i} * factor, factor) /
        static_cast<double>(kBlockBits);
    sum += std::pow(fill, k_);
  }
  return sum / folded;
}

void BloomSegment::Fold(uint32_t factor) {
  const uint32_t folded = num_blocks_ / factor;
  std::unique_ptr<uint64_t, AlignedFree> out(AllocateBlocks(folded));
  for (uint32_t i = 0; i < folded; ++i) {
    for (uint32_t b = 0; b < factor; ++b) {
      const uint64_t* src =
          words_.get() + (size_t{i} * factor + b) * kBlockWords;
      for (uint32_t w = 0; w < kBlockWords; ++w) {
        out.get()[size_t{i} * kBlockWords + w] |= src[w];
      }
    }
  }
  words_ = std::move(out);
  num_blocks_ = folded;
  capacity_ = count_;
}

void BloomSegment::Assign(const uint64_t* words, uint64_t count) {
  std::memcpy(words_.get(), words, bit_bytes());
  count_ = count;
}

}  // namespace exposure_filter
