// The model a run's table entry is stored against (user_filter_layout.cc):
// k as its difference to CanonicalRiceK(n, U), the payload bits and the
// weight as their differences to ExpectedRiceBits(n, U, k) and
// ExpectedWeight(n, b, U). Every Decode of a user's tables needs them for
// each run, on every write and lookup, though a sealed run's (n, U, b, k)
// never change and an open run's change once per write: the model's expm1
// and llround were ~4% of the server's CPU in the feed loop. The memo keeps
// them per thread, keyed by every input: a hit returns exactly what the
// computation returned.
#ifndef EXPOSURE_FILTER_SRC_FILTER_RUN_ENTRY_MODEL_H_
#define EXPOSURE_FILTER_SRC_FILTER_RUN_ENTRY_MODEL_H_

#include <cstddef>
#include <cstdint>

namespace exposure_filter {

// Expected weight (UserFilter::RunMeta::weight) of n fingerprints at (b, u):
// an item lands on f with probability c_f / 2^b, so a stored f covers E[c_f]
// = sum c^2 / 2^b prefixes (size-biased), with u - h fingerprints covering
// floor(2^b / u) prefixes and h = 2^b mod u one more. Stored as the
// difference, a few units instead of 2 varint bytes.
int64_t ExpectedWeight(uint64_t n, int b, uint64_t u);

// What a run entry's count n, universe U, precision b and k's difference to
// CanonicalRiceK(n, U) determine.
struct RunEntryModel {
  int rice_k = 0;         // uint8_t(CanonicalRiceK(n, U) + k_delta)
  int64_t rice_bits = 0;  // ExpectedRiceBits(n, U, rice_k)
  int64_t weight = 0;     // ExpectedWeight(n, b, U)
};

// Evaluated, no memo.
RunEntryModel ComputeRunEntryModel(uint64_t n, uint64_t u, int b,
                                   int64_t k_delta);

// ComputeRunEntryModel memoised: two-way set-associative, kSets sets of two
// 32-byte entries, one cache line a set (16 KiB), least recently used way
// replaced. A user's tables hold ~7 runs and the feed loop writes a few dozen
// users at a time, so the live keys fit; a key outside the packed ranges
// (n >= 2^32, U not in [1, 2^32], b >= 64, |k_delta| > 32: no table holds
// one) is computed every time. Not thread-safe: one per thread (ThisThread).
class RunEntryModelMemo {
 public:
  static constexpr int kSetBits = 8;
  static constexpr size_t kSets = size_t{1} << kSetBits;

  // The calling thread's memo, allocated on its first call: only the threads
  // that decode tables hold one.
  static RunEntryModelMemo& ThisThread();

  RunEntryModel Get(uint64_t n, uint64_t u, int b, int64_t k_delta);

  // The set Get files the key in (kSets if it is not memoised): for tests.
  static size_t SetOf(uint64_t n, uint64_t u, int b, int64_t k_delta);
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Entry {
    uint64_t nu = 0;   // n << 32 | (U - 1)
    uint32_t tag = 0;  // 1 | b << 1 | (k_delta + 32) << 8; 0: empty
    int32_t rice_k = 0;
    int64_t rice_bits = 0;
    int64_t weight = 0;
  };
  struct alignas(64) Set {
    Entry way[2];  // way[0] the more recently used
  };
  // False if the key is outside the packed ranges.
  static bool Pack(uint64_t n, uint64_t u, int b, int64_t k_delta, uint64_t* nu,
                   uint32_t* tag);
  static size_t SetOfPacked(uint64_t nu, uint32_t tag);

  Set sets_[kSets];
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_RUN_ENTRY_MODEL_H_
