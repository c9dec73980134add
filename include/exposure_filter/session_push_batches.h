// The Session stream's opt-in to push batches (docs/session-stream.md
// "Push batches"): a client that sends this call metadata key with the
// value "1" when it opens the stream may get SessionResponse{pushes}, a
// run of queued pushes in one message, besides single pushes. A client
// that does not (one older than batches, which would skip the unknown
// field and so miss the pushes) gets only single pushes.
#ifndef EXPOSURE_FILTER_SESSION_PUSH_BATCHES_H_
#define EXPOSURE_FILTER_SESSION_PUSH_BATCHES_H_

namespace exposure_filter {

inline constexpr char kSessionPushBatchesMetadataKey[] =
    "x-exposure-session-push-batches";
inline constexpr char kSessionPushBatchesMetadataValue[] = "1";

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SESSION_PUSH_BATCHES_H_
