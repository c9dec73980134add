#include "src/filter/probe_kernel.h"

#include <cstdlib>
#include <cstring>

#include "exposure_filter/bloom_probe.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EF_HAVE_X86 1
#else
#define EF_HAVE_X86 0
#endif

namespace exposure_filter {
namespace {

// How far ahead the loop prefetches: a DRAM miss (~100 ns) spans a few dozen
// candidates at ~2 ns each, but the block index must be computed for each, so
// 8..16 is the sweet spot measured in bench/filter_bench.cc.
constexpr size_t kPrefetchDistance = 12;

inline const uint64_t* BlockOf(const SegmentRef& seg, uint64_t h) {
  return seg.words + size_t{BlockIndex(h, seg.num_blocks)} * kBlockWords;
}

}  // namespace

void RemoveContainedPortable(SegmentRef seg, const uint64_t* hashes, size_t n,
                             uint8_t* keep) {
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      __builtin_prefetch(BlockOf(seg, hashes[i + kPrefetchDistance]));
    }
    if (keep[i] && BlockMayContain(BlockOf(seg, hashes[i]), hashes[i], seg.k)) {
      keep[i] = 0;
    }
  }
}

namespace {

// A user's whole filter is prefetched up front when it fits comfortably in
// L2 (512 KiB per core on the machines measured; half of it leaves room for
// the request's hashes and the gRPC buffers). 2,000 items at 1% is ~6 KiB,
// 50,000 items ~110 KiB.
constexpr size_t kWarmWholeFilterBytes = size_t{256} << 10;
// Segments per filter the candidate-major kernels handle on the stack; a
// 30-day window has ~7-10 (more only after many growth segments).
constexpr size_t kMaxSegmentsCandidateMajor = 32;

// Prefetches every block of the segments when the candidate-major walk
// applies (few enough segments, small enough in total); false otherwise.
bool WarmWholeFilter(const SegmentRef* segs, size_t num_segs) {
  if (num_segs > kMaxSegmentsCandidateMajor) return false;
  size_t bytes = 0;
  for (size_t s = 0; s < num_segs; ++s) {
    bytes += size_t{segs[s].num_blocks} * kBlockBytes;
  }
  if (bytes > kWarmWholeFilterBytes) return false;
  for (size_t s = 0; s < num_segs; ++s) {
    const char* p = reinterpret_cast<const char*>(segs[s].words);
    for (uint32_t b = 0; b < segs[s].num_blocks; ++b) {
      __builtin_prefetch(p + size_t{b} * kBlockBytes);
    }
  }
  return true;
}

}  // namespace

void RemoveContainedAnyPortable(const SegmentRef* segs, size_t num_segs,
                                const uint64_t* hashes, size_t n,
                                uint8_t* keep) {
  if (!WarmWholeFilter(segs, num_segs)) {
    for (size_t s = 0; s < num_segs; ++s) {
      RemoveContainedPortable(segs[s], hashes, n, keep);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    for (size_t s = 0; s < num_segs; ++s) {
      if (BlockMayContain(BlockOf(segs[s], hashes[i]), hashes[i], segs[s].k)) {
        keep[i] = 0;
        break;
      }
    }
  }
}

#if EF_HAVE_X86

namespace {

// kProbeMultiplier^i mod 2^32 for i = 0..15: probe i of bloom_probe.h's
// ForEachProbe is the top 9 bits of lo32(hash) * M^i, so all probes of a
// candidate are one broadcast and two vector multiplies, not a dependent
// chain of k scalar multiplies.
struct ProbePowers {
  alignas(32) uint32_t v[kMaxProbes];
  alignas(32) int32_t lane_enabled[9][8];
  constexpr ProbePowers() : v(), lane_enabled() {
    uint32_t p = 1;
    for (int i = 0; i < kMaxProbes; ++i) {
      v[i] = p;
      p *= kProbeMultiplier;
    }
    // Row r enables lanes 0..r-1: the first group of 8 probes uses row
    // min(k, 8), the second (probes 8..15) row k - 8.
    for (int k = 0; k <= 8; ++k) {
      for (int lane = 0; lane < 8; ++lane) {
        lane_enabled[k][lane] = lane < k ? -1 : 0;
      }
    }
  }
};
constexpr ProbePowers kPowers;

// The 8 probe bits h*powers (lanes where `enabled` is set) are all present in
// the 512-bit block held in lo (words 0..7 as 32-bit lanes) and hi (8..15).
// Bit b of the block is bit (b & 31) of 32-bit word (b >> 5) on the
// little-endian layout, the same bit bloom_probe.h addresses as bit (b & 63)
// of 64-bit word (b >> 6).
__attribute__((target("avx2"))) inline bool ProbesInBlock(__m256i lo,
                                                          __m256i hi, __m256i h,
                                                          __m256i powers,
                                                          __m256i enabled) {
  const __m256i bit = _mm256_srli_epi32(_mm256_mullo_epi32(h, powers), 23);
  const __m256i word = _mm256_srli_epi32(bit, 5);  // 0..15
  // vpermd reads the low 3 bits of each index: pick the word from both halves
  // and blend on bit 3 (moved to the sign bit that blendv tests).
  const __m256 from_lo =
      _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(lo, word));
  const __m256 from_hi =
      _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(hi, word));
  const __m256i words = _mm256_castps_si256(_mm256_blendv_ps(
      from_lo, from_hi, _mm256_castsi256_ps(_mm256_slli_epi32(word, 28))));
  const __m256i mask = _mm256_and_si256(
      _mm256_sllv_epi32(_mm256_set1_epi32(1),
                        _mm256_and_si256(bit, _mm256_set1_epi32(31))),
      enabled);
  // testc: (~words & mask) == 0, i.e. every probed bit is set.
  return _mm256_testc_si256(words, mask);
}

// ProbesInBlock split in two: the parts that depend on the hash only
// (computed once per candidate) and the test against one block.
struct ProbeLanes {
  __m256i word;    // 32-bit word of the block, 0..15
  __m256i select;  // word bit 3 in the sign bit: blendv picks the high half
  __m256i mask;    // the probe bit within its word
};

__attribute__((target("avx2"))) inline ProbeLanes MakeProbeLanes(
    __m256i h, __m256i powers) {
  const __m256i bit = _mm256_srli_epi32(_mm256_mullo_epi32(h, powers), 23);
  ProbeLanes p;
  p.word = _mm256_srli_epi32(bit, 5);
  p.select = _mm256_slli_epi32(p.word, 28);
  p.mask = _mm256_sllv_epi32(_mm256_set1_epi32(1),
                             _mm256_and_si256(bit, _mm256_set1_epi32(31)));
  return p;
}

__attribute__((target("avx2"))) inline bool ProbeLanesInBlock(
    __m256i lo, __m256i hi, const ProbeLanes& p, __m256i enabled) {
  const __m256 from_lo =
      _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(lo, p.word));
  const __m256 from_hi =
      _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(hi, p.word));
  const __m256i words = _mm256_castps_si256(
      _mm256_blendv_ps(from_lo, from_hi, _mm256_castsi256_ps(p.select)));
  return _mm256_testc_si256(words, _mm256_and_si256(p.mask, enabled));
}

}  // namespace

__attribute__((target("avx2"))) void RemoveContainedAvx2(SegmentRef seg,
                                                         const uint64_t* hashes,
                                                         size_t n,
                                                         uint8_t* keep) {
  const int k = seg.k;
  const __m256i powers_lo =
      _mm256_load_si256(reinterpret_cast<const __m256i*>(kPowers.v));
  const __m256i powers_hi =
      _mm256_load_si256(reinterpret_cast<const __m256i*>(kPowers.v + 8));
  const __m256i enabled_lo = _mm256_load_si256(
      reinterpret_cast<const __m256i*>(kPowers.lane_enabled[k < 8 ? k : 8]));
  const __m256i enabled_hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(
      kPowers.lane_enabled[k > 8 ? k - 8 : 0]));
  const bool two_groups = k > 8;
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      _mm_prefetch(reinterpret_cast<const char*>(
                       BlockOf(seg, hashes[i + kPrefetchDistance])),
                   _MM_HINT_T0);
    }
    if (!keep[i]) continue;
    const uint64_t hash = hashes[i];
    const __m256i* block = reinterpret_cast<const __m256i*>(BlockOf(seg, hash));
    const __m256i lo = _mm256_loadu_si256(block);
    const __m256i hi = _mm256_loadu_si256(block + 1);
    const __m256i h = _mm256_set1_epi32(static_cast<int32_t>(hash));
    bool all = ProbesInBlock(lo, hi, h, powers_lo, enabled_lo);
    if (two_groups && all)
      all = ProbesInBlock(lo, hi, h, powers_hi, enabled_hi);
    if (all) keep[i] = 0;
  }
}

namespace {

// One segment as the candidate-major AVX2 walk reads it: its blocks as pairs
// of 256-bit halves and the lanes of each probe group its k enables.
struct SegmentLanes {
  __m256i enabled_lo;
  __m256i enabled_hi;
  const __m256i* blocks;
  uint64_t num_blocks;
  bool two_groups;
};

}  // namespace

__attribute__((target("avx2"))) void RemoveContainedAnyAvx2(
    const SegmentRef* segs, size_t num_segs, const uint64_t* hashes, size_t n,
    uint8_t* keep) {
  if (!WarmWholeFilter(segs, num_segs)) {
    for (size_t s = 0; s < num_segs; ++s) {
      RemoveContainedAvx2(segs[s], hashes, n, keep);
    }
    return;
  }
  SegmentLanes lanes[kMaxSegmentsCandidateMajor];
  bool any_two_groups = false;
  for (size_t s = 0; s < num_segs; ++s) {
    const int k = segs[s].k;
    lanes[s].enabled_lo = _mm256_load_si256(
        reinterpret_cast<const __m256i*>(kPowers.lane_enabled[k < 8 ? k : 8]));
    lanes[s].enabled_hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(
        kPowers.lane_enabled[k > 8 ? k - 8 : 0]));
    lanes[s].blocks = reinterpret_cast<const __m256i*>(segs[s].words);
    lanes[s].num_blocks = segs[s].num_blocks;
    lanes[s].two_groups = k > 8;
    any_two_groups |= k > 8;
  }
  const __m256i powers_lo =
      _mm256_load_si256(reinterpret_cast<const __m256i*>(kPowers.v));
  const __m256i powers_hi =
      _mm256_load_si256(reinterpret_cast<const __m256i*>(kPowers.v + 8));
  for (size_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    const uint64_t hash = hashes[i];
    // The probe bits of all segments: see ProbesInBlock.
    const __m256i h = _mm256_set1_epi32(static_cast<int32_t>(hash));
    const ProbeLanes lo = MakeProbeLanes(h, powers_lo);
    const ProbeLanes hi =
        any_two_groups ? MakeProbeLanes(h, powers_hi) : ProbeLanes{};
    const uint64_t block_key = hash >> 32;
    for (size_t s = 0; s < num_segs; ++s) {
      const SegmentLanes& seg = lanes[s];
      // BlockIndex(): fast range of the hash's top 32 bits.
      const __m256i* block =
          seg.blocks + 2 * ((block_key * seg.num_blocks) >> 32);
      const __m256i block_lo = _mm256_loadu_si256(block);
      const __m256i block_hi = _mm256_loadu_si256(block + 1);
      if (!ProbeLanesInBlock(block_lo, block_hi, lo, seg.enabled_lo)) continue;
      if (seg.two_groups &&
          !ProbeLanesInBlock(block_lo, block_hi, hi, seg.enabled_hi)) {
        continue;
      }
      keep[i] = 0;
      break;
    }
  }
}

bool Avx2Supported() { return __builtin_cpu_supports("avx2"); }

#else  // !EF_HAVE_X86

void RemoveContainedAvx2(SegmentRef seg, const uint64_t* hashes, size_t n,
                         uint8_t* keep) {
  RemoveContainedPortable(seg, hashes, n, keep);
}

void RemoveContainedAnyAvx2(const SegmentRef* segs, size_t num_segs,
                            const uint64_t* hashes, size_t n, uint8_t* keep) {
  RemoveContainedAnyPortable(segs, num_segs, hashes, n, keep);
}

bool Avx2Supported() { return false; }

#endif  // EF_HAVE_X86

namespace {

ProbeKernelKind ChooseKernel() {
  if (PortableKernelsForced()) return ProbeKernelKind::kPortable;
  return Avx2Supported() ? ProbeKernelKind::kAvx2 : ProbeKernelKind::kPortable;
}

// Chosen once (thread-safe static init); every call after is an indirect
// call through a constant pointer.
RemoveContainedFn ActiveFn() {
  static const RemoveContainedFn fn = ChooseKernel() == ProbeKernelKind::kAvx2
                                          ? &RemoveContainedAvx2
                                          : &RemoveContainedPortable;
  return fn;
}

}  // namespace

bool PortableKernelsForced() {
  const char* forced = std::getenv("EXPOSURE_FILTER_PROBE_KERNEL");
  return forced != nullptr && std::strcmp(forced, "portable") == 0;
}

#if defined(__x86_64__)

bool Avx512BwVlSupported() {
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

bool Avx512GathersFast() {
  // Gathers are fast on Intel's AVX-512 cores (the claim probe 1.3-3x the
  // portable loop on an Intel Xeon with AVX-512 FP16) and microcoded on
  // AMD's Zen 4, where a gather probe measured ~10% slower than the
  // portable loop (docs/format2-design.md).
  return Avx512BwVlSupported() && __builtin_cpu_is("intel");
}

#else  // !defined(__x86_64__)

bool Avx512BwVlSupported() { return false; }

bool Avx512GathersFast() { return false; }

#endif  // defined(__x86_64__)

ProbeKernelKind ActiveProbeKernel() {
  return ActiveFn() == &RemoveContainedAvx2 ? ProbeKernelKind::kAvx2
                                            : ProbeKernelKind::kPortable;
}

const char* ProbeKernelName(ProbeKernelKind kind) {
  return kind == ProbeKernelKind::kAvx2 ? "avx2" : "portable";
}

void RemoveContained(SegmentRef seg, const uint64_t* hashes, size_t n,
                     uint8_t* keep) {
  ActiveFn()(seg, hashes, n, keep);
}

void RemoveContainedAny(const SegmentRef* segs, size_t num_segs,
                        const uint64_t* hashes, size_t n, uint8_t* keep) {
  if (ActiveFn() == &RemoveContainedAvx2) {
    RemoveContainedAnyAvx2(segs, num_segs, hashes, n, keep);
  } else {
    RemoveContainedAnyPortable(segs, num_segs, hashes, n, keep);
  }
}

}  // namespace exposure_filter
