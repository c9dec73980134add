#include "src/filter/bloom_segment.h"

#include <cstring>
#include <new>

#include "src/filter/bloom_math.h"

namespace exposure_filter {
namespace {

uint64_t* AllocateBlocks(uint32_t num_blocks) {
  const size_t bytes = size_t{num_blocks} * kBlockBytes;
  auto* p = static_cast<uint64_t*>(
      ::operator new(bytes, std::align_val_t{kBlockBytes}));
  std::memset(p, 0, bytes);
  return p;
}

}  // namespace

void BloomSegment::AlignedFree::operator()(uint64_t* p) const {
  ::operator delete(p, std::align_val_t{kBlockBytes});
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

void BloomSegment::Assign(const uint64_t* words, uint64_t count) {
  std::memcpy(words_.get(), words, bit_bytes());
  count_ = count;
}

}  // namespace exposure_filter
