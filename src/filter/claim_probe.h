// The probe half of ClaimIndex (claim_index.h): each candidate's granule
// (its hash's top 32 bits) against the codes filed under its bucket.
//
// Two kernels with one result: a portable loop, and an AVX-512 one that
// probes 16 candidates at a time with gathers (bucket starts, then each
// bucket's first entry), so the loads of 16 candidates are in flight at
// once; buckets holding two or more codes are finished lane by lane.
// ActiveClaimProbe() picks AVX-512 where the CPU has it (F, BW, VL) and
// its gathers are fast (Avx512GathersFast, probe_kernel.h: Intel's
// cores; not AMD's Zen 4, where they are microcoded), unless
// EXPOSURE_FILTER_PROBE_KERNEL=portable.
#ifndef EXPOSURE_FILTER_SRC_FILTER_CLAIM_PROBE_H_
#define EXPOSURE_FILTER_SRC_FILTER_CLAIM_PROBE_H_

#include <cstddef>
#include <cstdint>

namespace exposure_filter {

// A filed code: the hashes it claims, those whose top 32 bits (their
// 2^32-hash granule) lie in [first, first + width] (a check is one
// unsigned compare, no fingerprint to compute; exact since b <= 32).
struct FiledClaim {
  uint32_t first;
  uint32_t width;
};

// The filed codes, as ClaimIndex lays them out: bucket x = granule >>
// shift holds entries [start[x], start[x + 1]); `entries` holds one
// readable padding entry past the last bucket's (a probe of an empty last
// bucket reads it, masked off by the bucket's length 0).
struct FiledClaims {
  const uint32_t* start;
  const FiledClaim* entries;
  int shift;  // 32 - bucket bits
};

using ClaimProbeFn = void (*)(const FiledClaims& claims, const uint64_t* hashes,
                              size_t n, uint8_t* keep);

// Clears keep[i] where some filed code claims hashes[i] (keep[i] == 0 on
// entry stays 0).
void ProbeClaimsPortable(const FiledClaims& claims, const uint64_t* hashes,
                         size_t n, uint8_t* keep);
// Only call when Avx512BwVlSupported() (probe_kernel.h).
void ProbeClaimsAvx512(const FiledClaims& claims, const uint64_t* hashes,
                       size_t n, uint8_t* keep);

// The kernel for this CPU (see above).
ClaimProbeFn ActiveClaimProbe();

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_CLAIM_PROBE_H_
