// A run entry's model values and their per-thread memo: run_entry_model.h.
#include "src/filter/run_entry_model.h"

#include <cmath>
#include <memory>
#include <utility>

#include "src/filter/rice_model.h"

namespace exposure_filter {

int64_t ExpectedWeight(uint64_t n, int b, uint64_t u) {
  const uint64_t full = uint64_t{1} << b;
  if (u >= full) return static_cast<int64_t>(n);
  const uint64_t lo = full / u;
  const uint64_t hi_count = full - lo * u;
  const double lo_d = static_cast<double>(lo);
  const double mean_c =
      (static_cast<double>(u - hi_count) * lo_d * lo_d +
       static_cast<double>(hi_count) * (lo_d + 1) * (lo_d + 1)) /
      static_cast<double>(full);
  return std::llround(static_cast<double>(n) * mean_c);
}

RunEntryModel ComputeRunEntryModel(uint64_t n, uint64_t u, int b,
                                   int64_t k_delta) {
  RunEntryModel m;
  // A table's k is a byte (RunMeta::rice_k): the sum wraps as it does there.
  m.rice_k = static_cast<uint8_t>(CanonicalRiceK(n, u) + k_delta);
  m.rice_bits = ExpectedRiceBits(n, u, m.rice_k);
  m.weight = ExpectedWeight(n, b, u);
  return m;
}

RunEntryModelMemo& RunEntryModelMemo::ThisThread() {
  thread_local std::unique_ptr<RunEntryModelMemo> memo;
  if (memo == nullptr) memo = std::make_unique<RunEntryModelMemo>();
  return *memo;
}

bool RunEntryModelMemo::Pack(uint64_t n, uint64_t u, int b, int64_t k_delta,
                             uint64_t* nu, uint32_t* tag) {
  // Runs hold n < 2^32 (a u32 count), 1 <= U <= 2^32 (b <= 32), and k and
  // its canonical value are both in [0, 31].
  if ((n >> 32) != 0 || u == 0 || ((u - 1) >> 32) != 0 || b < 0 || b >= 64 ||
      k_delta < -32 || k_delta >= 32) {
    return false;
  }
  *nu = (n << 32) | (u - 1);
  *tag = 1u | static_cast<uint32_t>(b) << 1 |
         static_cast<uint32_t>(k_delta + 32) << 8;
  return true;
}

size_t RunEntryModelMemo::SetOfPacked(uint64_t nu, uint32_t tag) {
  // Two multiplications by odd constants (the golden ratio's and
  // SplitMix64's): the top bits depend on every bit of the key.
  const uint64_t h = (nu * 0x9e3779b97f4a7c15u ^ tag) * 0xbf58476d1ce4e5b9u;
  return static_cast<size_t>(h >> (64 - kSetBits));
}

size_t RunEntryModelMemo::SetOf(uint64_t n, uint64_t u, int b,
                                int64_t k_delta) {
  uint64_t nu;
  uint32_t tag;
  if (!Pack(n, u, b, k_delta, &nu, &tag)) return kSets;
  return SetOfPacked(nu, tag);
}

RunEntryModel RunEntryModelMemo::Get(uint64_t n, uint64_t u, int b,
                                     int64_t k_delta) {
  uint64_t nu;
  uint32_t tag;
  if (!Pack(n, u, b, k_delta, &nu, &tag)) {
    return ComputeRunEntryModel(n, u, b, k_delta);
  }
  Set& set = sets_[SetOfPacked(nu, tag)];
  auto model = [](const Entry& e) {
    RunEntryModel m;
    m.rice_k = e.rice_k;
    m.rice_bits = e.rice_bits;
    m.weight = e.weight;
    return m;
  };
  if (set.way[0].nu == nu && set.way[0].tag == tag) {
    ++hits_;
    return model(set.way[0]);
  }
  if (set.way[1].nu == nu && set.way[1].tag == tag) {
    ++hits_;
    std::swap(set.way[0], set.way[1]);
    return model(set.way[0]);
  }
  ++misses_;
  const RunEntryModel m = ComputeRunEntryModel(n, u, b, k_delta);
  set.way[1] = set.way[0];
  set.way[0] = Entry{nu, tag, m.rice_k, m.rice_bits, m.weight};
  return m;
}

}  // namespace exposure_filter
