// AdmissionGate: the server's own overload limit
// (docs/reliability.md "Overload"). Every data-plane exposure.v1 RPC asks for
// admission before its handler runs and holds it until its response has been
// sent (the reactor's OnDone). Above --max_inflight_rpcs RPCs, or
// --max_inflight_request_bytes of request messages, across the whole server,
// the RPC is answered RESOURCE_EXHAUSTED at once, naming the limit, without
// doing its work: excess load is shed in microseconds instead of queueing
// behind work that is already late. Health, reflection and GetServerStats
// are never gated, so probes and operators keep their answers.
//
// gRPC bounds what is buffered before a handler runs (ResourceQuota, max
// concurrent streams, max message size: exposure_filter_server.cc); this
// gate bounds what handlers and their unsent responses hold after.
#ifndef EXPOSURE_FILTER_SRC_SERVER_ADMISSION_GATE_H_
#define EXPOSURE_FILTER_SRC_SERVER_ADMISSION_GATE_H_

#include <prometheus/collectable.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "src/server/config/admission_limits.h"

namespace exposure_filter {

class AdmissionGate final : public prometheus::Collectable {
 public:
  explicit AdmissionGate(const AdmissionLimits& limits) : limits_(limits) {}

  // Admits an RPC whose request message is `request_bytes` long, or returns
  // RESOURCE_EXHAUSTED naming the limit it would exceed. A request larger
  // than the byte limit on its own is still admitted when nothing else is in
  // flight, so every request --max_receive_message_bytes lets in can
  // succeed on a quiet server. After OK, call Release(request_bytes) once.
  absl::Status Admit(uint64_t request_bytes);
  void Release(uint64_t request_bytes);

  uint64_t inflight_rpcs() const {
    return inflight_rpcs_.load(std::memory_order_relaxed);
  }
  uint64_t inflight_request_bytes() const {
    return inflight_bytes_.load(std::memory_order_relaxed);
  }
  // RPCs refused since start, by the limit that refused them.
  uint64_t shed_by_rpcs() const {
    return shed_by_rpcs_.load(std::memory_order_relaxed);
  }
  uint64_t shed_by_bytes() const {
    return shed_by_bytes_.load(std::memory_order_relaxed);
  }
  const AdmissionLimits& limits() const { return limits_; }

  // exposure_filter_rpcs_shed_total{limit}, exposure_filter_inflight_rpcs,
  // exposure_filter_inflight_request_bytes and the two limits as gauges.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const AdmissionLimits limits_;
  std::atomic<uint64_t> inflight_rpcs_{0};
  std::atomic<uint64_t> inflight_bytes_{0};
  std::atomic<uint64_t> shed_by_rpcs_{0};
  std::atomic<uint64_t> shed_by_bytes_{0};
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_ADMISSION_GATE_H_
