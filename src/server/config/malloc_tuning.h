// MallocTuning: how glibc malloc keeps memory it got back from free().
//
// By default an arena hands the free top of its heap back to the kernel once
// it passes 128 KiB (M_TRIM_THRESHOLD, raised only by frees of mmap'd
// chunks). Serving a FilterRecalled of 5,000 candidates (a 40 KB request,
// 64 KiB read chunks, the hashes, the reply) frees more than that at the
// top of a heap, so the heap was trimmed and grown again per request: the
// next recvmsg() wrote into pages the kernel had to fault in and zero.
// `perf record` of the server under that load: exc_page_fault,
// clear_page_erms and unmap_page_range ~2.3% of its samples; still 3.4% at
// a 256 KiB threshold, none at 1 MiB (docs/performance.md, "Malloc trim
// threshold").
//
// The server and the transport-ceiling server (which measures the same
// transport) both apply it at startup, before any thread starts.
#ifndef EXPOSURE_FILTER_SRC_SERVER_CONFIG_MALLOC_TUNING_H_
#define EXPOSURE_FILTER_SRC_SERVER_CONFIG_MALLOC_TUNING_H_

#include <cstddef>

namespace exposure_filter {

// The free memory an arena keeps at its top, and the size from which an
// allocation gets its own mapping (mallopt disables glibc's dynamic
// adjustment of the latter once the former is set, so both are set). The
// cost: each arena (glibc makes at most 8 per core, in practice about one
// per thread that allocates) may hold up to this much freed memory.
inline constexpr size_t kMallocKeepBytes = size_t{4} << 20;

// Applies kMallocKeepBytes through mallopt unless the environment sets
// GLIBC_TUNABLES (an operator's own malloc settings win). Returns whether it
// changed anything.
bool ApplyMallocTuning();

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_CONFIG_MALLOC_TUNING_H_
