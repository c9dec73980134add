// SessionOptions: the bounds of the session stream (docs/session-stream.md
// "Flow control, limits and resync"), set by the --session_* flags. Every
// bound is what keeps one client, or all of them, from growing the
// server's memory: streams, subscriptions, and each stream's queue of
// messages not yet handed to gRPC.
#ifndef EXPOSURE_FILTER_SRC_SERVER_CONFIG_SESSION_OPTIONS_H_
#define EXPOSURE_FILTER_SRC_SERVER_CONFIG_SESSION_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace exposure_filter {

struct SessionOptions {
  // Open streams on the server; one more ends at once RESOURCE_EXHAUSTED.
  int64_t max_streams = 256;
  // Subscriptions of one stream, and of all streams together; one more is
  // refused with an in-stream RESOURCE_EXHAUSTED.
  int64_t max_subscriptions_per_stream = 100000;
  int64_t max_subscriptions = 1000000;
  // Per-stream queue: bytes and messages. The defaults hold ~25,000 pushes
  // of 20 items (~170 bytes each), or a few thousand snapshots of a
  // typical user, and bound the queues of every stream together at
  // max_streams * 4 MiB = 1 GiB.
  int64_t max_queue_bytes = int64_t{4} << 20;
  int64_t max_queue_messages = 8192;
  // A subscription's lease after the last request naming its user.
  absl::Duration subscription_idle_timeout = absl::Minutes(10);

  // Every count and byte bound >= 1, the timeout > 0 and finite, the
  // per-stream subscription bound <= the server-wide one; else
  // InvalidArgument naming the flag.
  absl::Status Validate() const;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_CONFIG_SESSION_OPTIONS_H_
