#include "src/server/config/transport_tuning.h"

#include "absl/strings/str_cat.h"

namespace exposure_filter {
namespace {

constexpr char kMaxFrameSize[] = "grpc.http2.max_frame_size";
constexpr char kReadChunk[] = "grpc.experimental.tcp_read_chunk_size";
constexpr char kMinReadChunk[] = "grpc.experimental.tcp_min_read_chunk_size";
constexpr char kMaxReadChunk[] = "grpc.experimental.tcp_max_read_chunk_size";

template <typename Sink>
void Apply(const TransportTuning& t, Sink&& set) {
  set(kMaxFrameSize, t.http2_max_frame_size);
  set(kReadChunk, t.tcp_read_chunk_size);
  set(kMinReadChunk, t.tcp_min_read_chunk_size);
  set(kMaxReadChunk, t.tcp_max_read_chunk_size);
}

}  // namespace

absl::Status TransportTuning::Validate() const {
  // RFC 9113 section 4.2: SETTINGS_MAX_FRAME_SIZE in [2^14, 2^24 - 1].
  if (http2_max_frame_size < (1 << 14) ||
      http2_max_frame_size > (1 << 24) - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http2_max_frame_size must be in [16384, 16777215], got ",
        http2_max_frame_size));
  }
  if (tcp_min_read_chunk_size <= 0 ||
      tcp_min_read_chunk_size > tcp_read_chunk_size ||
      tcp_read_chunk_size > tcp_max_read_chunk_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need 0 < --tcp_min_read_chunk_size (", tcp_min_read_chunk_size,
        ") <= --tcp_read_chunk_size (", tcp_read_chunk_size,
        ") <= --tcp_max_read_chunk_size (", tcp_max_read_chunk_size, ")"));
  }
  return absl::OkStatus();
}

void ApplyTransportTuning(const TransportTuning& t,
                          grpc::ServerBuilder* builder) {
  Apply(t, [builder](const char* name, int v) {
    builder->AddChannelArgument(name, v);
  });
}

void ApplyTransportTuning(const TransportTuning& t,
                          grpc::ChannelArguments* args) {
  Apply(t, [args](const char* name, int v) { args->SetInt(name, v); });
}

}  // namespace exposure_filter
