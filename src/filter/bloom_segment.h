// BloomSegment: one fixed-size cache-line blocked Bloom filter.
//
// A segment never grows; the time-sliced UserFilter adds segments instead.
// Blocks are 64-byte aligned so a probe touches exactly one cache line.
#ifndef EXPOSURE_FILTER_SRC_FILTER_BLOOM_SEGMENT_H_
#define EXPOSURE_FILTER_SRC_FILTER_BLOOM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "exposure_filter/bloom_probe.h"

namespace exposure_filter {

class BloomSegment {
 public:
  // `capacity` is the item count at which the segment reaches its FP budget.
  BloomSegment(uint32_t num_blocks, int k, uint64_t capacity);
  BloomSegment(BloomSegment&&) noexcept = default;
  BloomSegment& operator=(BloomSegment&&) noexcept = default;
  BloomSegment(const BloomSegment& other);
  BloomSegment& operator=(const BloomSegment&) = delete;

  bool MayContain(uint64_t item_hash) const {
    return BlockMayContain(BlockFor(item_hash), item_hash, k_);
  }
  void Add(uint64_t item_hash) {
    BlockAdd(BlockFor(item_hash), item_hash, k_);
    ++count_;
  }
  // Starts loading the block of `item_hash` into cache.
  void Prefetch(uint64_t item_hash) const {
    __builtin_prefetch(BlockFor(item_hash));
  }

  uint32_t num_blocks() const { return num_blocks_; }
  int k() const { return k_; }
  uint64_t count() const { return count_; }
  uint64_t capacity() const { return capacity_; }
  bool full() const { return count_ >= capacity_; }
  const uint64_t* words() const { return words_.get(); }
  size_t bit_bytes() const { return size_t{num_blocks_} * kBlockBytes; }
  // Expected FP rate at the current count (bloom_math.h).
  double EstimatedFpRate() const;
  // The FP rate of these exact bits for a fresh item: mean over blocks of
  // (set bits / 512)^k, each probe landing on a uniform bit of its block.
  double MeasuredFpRate() const { return FoldedFpRate(1); }
  // MeasuredFpRate() of the segment folded by `factor` (which divides
  // num_blocks()), without folding it.
  double FoldedFpRate(uint32_t factor) const;
  // Folds block i*factor .. (i+1)*factor-1 into block i: fast-range block
  // choice makes this exact (every item keeps all its bits). The segment is
  // then full: later items go to a new segment.
  void Fold(uint32_t factor);

  // Replaces the content (used when decoding a snapshot). `words` must hold
  // num_blocks * 8 words.
  void Assign(const uint64_t* words, uint64_t count);

 private:
  struct AlignedFree {
    void operator()(uint64_t* p) const;
  };
  const uint64_t* BlockFor(uint64_t h) const {
    return words_.get() + size_t{BlockIndex(h, num_blocks_)} * kBlockWords;
  }
  uint64_t* BlockFor(uint64_t h) {
    return words_.get() + size_t{BlockIndex(h, num_blocks_)} * kBlockWords;
  }

  std::unique_ptr<uint64_t, AlignedFree> words_;
  uint32_t num_blocks_;
  int k_;
  uint64_t count_ = 0;
  uint64_t capacity_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_BLOOM_SEGMENT_H_
