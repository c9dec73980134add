// AdmissionLimits: how much data-plane work the AdmissionGate
// (src/server/admission_gate.h) lets in at once; set by the flags
// --max_inflight_rpcs and --max_inflight_request_bytes.
#ifndef EXPOSURE_FILTER_SRC_SERVER_CONFIG_ADMISSION_LIMITS_H_
#define EXPOSURE_FILTER_SRC_SERVER_CONFIG_ADMISSION_LIMITS_H_

#include <cstdint>

namespace exposure_filter {

struct AdmissionLimits {
  uint64_t max_inflight_rpcs = 0;           // 0 = no limit
  uint64_t max_inflight_request_bytes = 0;  // 0 = no limit
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_CONFIG_ADMISSION_LIMITS_H_
