// ProbeKernel: the batch membership check of one Bloom segment, the inner
// loop of FilterRecalled and of a pulled filter's local check.
//
// Two implementations compute the same bits as bloom_probe.h (the format's
// single definition): a portable scalar loop and an AVX2 one that derives all
// probes of a candidate at once. The AVX2 kernel is compiled with a function
// target attribute, so the binary runs on any x86-64 and picks it at startup
// only if the CPU has AVX2 (`__builtin_cpu_supports`); other architectures
// use the portable kernel. Both are tested to give identical results
// (tests/filter/probe_kernel_test.cc).
#ifndef EXPOSURE_FILTER_SRC_FILTER_PROBE_KERNEL_H_
#define EXPOSURE_FILTER_SRC_FILTER_PROBE_KERNEL_H_

#include <cstddef>
#include <cstdint>

namespace exposure_filter {

// A segment as the kernel sees it: `num_blocks` 64-byte-aligned blocks of 8
// little-endian words.
struct SegmentRef {
  const uint64_t* words = nullptr;
  uint32_t num_blocks = 0;
  int k = 0;
};

// Clears keep[i] for each hashes[i] the segment may contain; entries already
// 0 are skipped (no probe, no cache miss). Prefetches the blocks of the
// candidates a few positions ahead so their misses overlap.
using RemoveContainedFn = void (*)(SegmentRef seg, const uint64_t* hashes,
                                   size_t n, uint8_t* keep);

enum class ProbeKernelKind { kPortable, kAvx2 };

void RemoveContainedPortable(SegmentRef seg, const uint64_t* hashes, size_t n,
                             uint8_t* keep);
// Only call when Avx2Supported().
void RemoveContainedAvx2(SegmentRef seg, const uint64_t* hashes, size_t n,
                         uint8_t* keep);
bool Avx2Supported();

// The kernel chosen for this CPU (AVX2 when available, unless the environment
// variable EXPOSURE_FILTER_PROBE_KERNEL=portable forces the portable one).
ProbeKernelKind ActiveProbeKernel();
// Whether EXPOSURE_FILTER_PROBE_KERNEL=portable is set: then every kernel
// chosen at startup (this one, the batch item hash) is the portable one.
bool PortableKernelsForced();
// AVX-512 F, BW and VL: what the claim probe's and the pushed-item bits'
// vector kernels need (claim_probe.h, pushed_item_bits.h).
bool Avx512BwVlSupported();
// Supported, and the CPU's gathers fast enough for a gather kernel (the
// claim probe's) to win: Intel's cores, not AMD's Zen 4, where they are
// microcoded.
bool Avx512GathersFast();
const char* ProbeKernelName(ProbeKernelKind kind);

// Dispatches to the active kernel.
void RemoveContained(SegmentRef seg, const uint64_t* hashes, size_t n,
                     uint8_t* keep);

// Clears keep[i] for each hashes[i] that any of the `num_segs` segments may
// contain (the whole filter of a user, or of a pulled FilterView); entries
// already 0 are skipped. Same result as RemoveContained over each segment in
// turn, but candidate-major: a candidate's probe bits are the same in every
// segment (they depend on the hash and k only), so they are derived once and
// each further segment costs one block index and one vector test, and the
// walk stops at the first segment that claims the candidate. A filter small
// enough to stay in L2 (every user but the largest) is prefetched whole
// first; larger ones fall back to the segment-major loop with look-ahead
// prefetch, which overlaps their DRAM misses better.
using RemoveContainedAnyFn = void (*)(const SegmentRef* segs, size_t num_segs,
                                      const uint64_t* hashes, size_t n,
                                      uint8_t* keep);
void RemoveContainedAnyPortable(const SegmentRef* segs, size_t num_segs,
                                const uint64_t* hashes, size_t n,
                                uint8_t* keep);
// Only call when Avx2Supported().
void RemoveContainedAnyAvx2(const SegmentRef* segs, size_t num_segs,
                            const uint64_t* hashes, size_t n, uint8_t* keep);
// Dispatches to the active kernel.
void RemoveContainedAny(const SegmentRef* segs, size_t num_segs,
                        const uint64_t* hashes, size_t n, uint8_t* keep);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_PROBE_KERNEL_H_
