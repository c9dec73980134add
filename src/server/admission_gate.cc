#include "src/server/admission_gate.h"

#include "absl/strings/str_cat.h"
#include "src/server/observability/metric_families.h"

namespace exposure_filter {

absl::Status AdmissionGate::Admit(uint64_t request_bytes) {
  // Optimistic: take the slot and the bytes, give them back if over. Two
  // racing RPCs may both be refused near the limit; never both admitted
  // past it.
  const uint64_t rpcs =
      inflight_rpcs_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (limits_.max_inflight_rpcs > 0 && rpcs > limits_.max_inflight_rpcs) {
    inflight_rpcs_.fetch_sub(1, std::memory_order_relaxed);
    shed_by_rpcs_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        "server overloaded: ", limits_.max_inflight_rpcs,
        " RPCs already in flight (--max_inflight_rpcs); retry with backoff"));
  }
  const uint64_t bytes =
      inflight_bytes_.fetch_add(request_bytes, std::memory_order_relaxed) +
      request_bytes;
  if (limits_.max_inflight_request_bytes > 0 &&
      bytes > limits_.max_inflight_request_bytes && bytes != request_bytes) {
    inflight_bytes_.fetch_sub(request_bytes, std::memory_order_relaxed);
    inflight_rpcs_.fetch_sub(1, std::memory_order_relaxed);
    shed_by_bytes_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        "server overloaded: requests in flight hold ", bytes - request_bytes,
        " bytes; this one (", request_bytes,
        " bytes) would exceed --max_inflight_request_bytes=",
        limits_.max_inflight_request_bytes, "; retry with backoff"));
  }
  return absl::OkStatus();
}

void AdmissionGate::Release(uint64_t request_bytes) {
  inflight_bytes_.fetch_sub(request_bytes, std::memory_order_relaxed);
  inflight_rpcs_.fetch_sub(1, std::memory_order_relaxed);
}

std::vector<prometheus::MetricFamily> AdmissionGate::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  out.push_back(MakeFamily(
      "exposure_filter_rpcs_shed_total",
      "exposure.v1 RPCs answered RESOURCE_EXHAUSTED by the admission limits, "
      "by limit (inflight_rpcs, inflight_request_bytes).",
      MetricType::Counter));
  AddSample(out.back(), {{"limit", "inflight_rpcs"}},
            static_cast<double>(shed_by_rpcs()));
  AddSample(out.back(), {{"limit", "inflight_request_bytes"}},
            static_cast<double>(shed_by_bytes()));
  auto gauge = [&](const char* name, const char* help, uint64_t value) {
    out.push_back(MakeFamily(name, help, MetricType::Gauge));
    AddSample(out.back(), {}, static_cast<double>(value));
  };
  gauge("exposure_filter_inflight_rpcs",
        "Admitted exposure.v1 RPCs not yet finished (response not yet sent).",
        inflight_rpcs());
  gauge("exposure_filter_inflight_request_bytes",
        "Bytes of the request messages of admitted RPCs in flight.",
        inflight_request_bytes());
  gauge("exposure_filter_max_inflight_rpcs",
        "--max_inflight_rpcs (0 = no limit).", limits_.max_inflight_rpcs);
  gauge("exposure_filter_max_inflight_request_bytes",
        "--max_inflight_request_bytes (0 = no limit).",
        limits_.max_inflight_request_bytes);
  return out;
}

}  // namespace exposure_filter
