#include "src/server/config/malloc_tuning.h"

#include <malloc.h>

#include <cstdlib>

namespace exposure_filter {

bool ApplyMallocTuning() {
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return false;
  // mallopt returns 1 on success.
  const int keep = static_cast<int>(kMallocKeepBytes);
  return mallopt(M_TRIM_THRESHOLD, keep) == 1 &&
         mallopt(M_MMAP_THRESHOLD, keep) == 1;
}

}  // namespace exposure_filter
