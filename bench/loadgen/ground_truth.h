// Ground truth of the load generator's workload: which item ids each
// benchmark user was shown, so every answer (FilterRecalled, a pulled filter,
// the Redis baseline) can be scored for false positives and negatives
// without asking the system under test.
#ifndef EXPOSURE_FILTER_BENCH_LOADGEN_GROUND_TRUTH_H_
#define EXPOSURE_FILTER_BENCH_LOADGEN_GROUND_TRUTH_H_

#include <cstdint>
#include <string>
#include <vector>

namespace exposure_filter::bench {

// User u was exposed to ids (u+1)<<32 | j for j < exposures_per_user; fresh
// candidates set bit 31 of the low word, so the two sets never meet.
inline std::string UserName(uint32_t u) {
  return "bench-u" + std::to_string(u);
}
inline uint64_t ExposedId(uint32_t u, uint32_t j) {
  return (uint64_t{u} + 1) << 32 | j;
}
inline uint64_t FreshId(uint32_t u, uint32_t r) {
  return (uint64_t{u} + 1) << 32 | 0x80000000u | (r & 0x7fffffffu);
}

// SplitMix64: the load generator draws ~5,000 numbers per request, so its
// generator must cost next to nothing (mt19937_64 showed up at ~16% of the
// client's profile).
struct FastRng {
  uint64_t state;
  explicit FastRng(uint64_t seed) : state(seed) {}
  uint64_t operator()() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return ((*this)() >> 11) * 0x1.0p-53; }
};

struct CandidateBatch {
  std::vector<uint64_t> ids;
  std::vector<uint8_t> exposed;  // ground truth per candidate
};

// `n` candidates for user u, each exposed with probability `exposed_fraction`.
inline void MakeCandidates(uint32_t u, uint32_t exposures_per_user, size_t n,
                           double exposed_fraction, FastRng& rng,
                           CandidateBatch* out) {
  out->ids.resize(n);
  out->exposed.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    const bool exposed =
        exposures_per_user > 0 && (r >> 11) * 0x1.0p-53 < exposed_fraction;
    out->exposed[i] = exposed;
    out->ids[i] =
        exposed
            ? ExposedId(u, static_cast<uint32_t>(rng() % exposures_per_user))
            : FreshId(u, static_cast<uint32_t>(rng()));
  }
}

// Scores a keep decision against the truth.
struct Accuracy {
  uint64_t fresh = 0, false_positives = 0;    // fresh but removed
  uint64_t exposed = 0, false_negatives = 0;  // exposed but kept
  void Add(const CandidateBatch& b, const uint8_t* keep) {
    for (size_t i = 0; i < b.ids.size(); ++i) {
      if (b.exposed[i]) {
        ++exposed;
        false_negatives += keep[i] != 0;
      } else {
        ++fresh;
        false_positives += keep[i] == 0;
      }
    }
  }
  void Merge(const Accuracy& o) {
    fresh += o.fresh;
    false_positives += o.false_positives;
    exposed += o.exposed;
    false_negatives += o.false_negatives;
  }
};

}  // namespace exposure_filter::bench

#endif  // EXPOSURE_FILTER_BENCH_LOADGEN_GROUND_TRUTH_H_
