// TransportTuning: the gRPC channel arguments that bound FilterRecalled's
// throughput (a 5,000-candidate request is ~40 KB), applied identically on
// the server (ServerBuilder) and on our clients (ChannelArguments), because
// HTTP/2 frame size is negotiated per direction and read-chunk sizing is
// per endpoint.
//
// Defaults are the measured best on the 2-core development machine
// (docs/performance.md, "Transport tuning"): gRPC's own defaults (16 KiB
// frames, 8 KiB read chunks) cut a 40 KB request into 3 frames read by ~5
// syscalls; 64 KiB frames and chunks read it in one.
#ifndef EXPOSURE_FILTER_SRC_SERVER_CONFIG_TRANSPORT_TUNING_H_
#define EXPOSURE_FILTER_SRC_SERVER_CONFIG_TRANSPORT_TUNING_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace exposure_filter {

struct TransportTuning {
  // grpc.http2.max_frame_size: largest HTTP/2 DATA frame we accept
  // (16 KiB .. 16 MiB - 1 by RFC 9113).
  int http2_max_frame_size = 64 << 10;
  // grpc.experimental.tcp_read_chunk_size and its bounds: how much one read()
  // asks the kernel for.
  int tcp_read_chunk_size = 64 << 10;
  int tcp_min_read_chunk_size = 16 << 10;
  int tcp_max_read_chunk_size = 4 << 20;

  absl::Status Validate() const;
};

void ApplyTransportTuning(const TransportTuning& t,
                          grpc::ServerBuilder* builder);
void ApplyTransportTuning(const TransportTuning& t,
                          grpc::ChannelArguments* args);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_CONFIG_TRANSPORT_TUNING_H_
