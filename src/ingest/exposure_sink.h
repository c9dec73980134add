// ExposureSink: where the Kafka consumer records what it decoded. The server
// implements it with the RecordExposure handler itself, so Kafka and gRPC
// writes share one path: validation, limits, the store, traced users, the
// write-ahead log commit, the metrics.
#ifndef EXPOSURE_FILTER_SRC_INGEST_EXPOSURE_SINK_H_
#define EXPOSURE_FILTER_SRC_INGEST_EXPOSURE_SINK_H_

#include <cstddef>

#include "absl/status/status.h"
#include "exposure/v1/exposure_filter.pb.h"

namespace exposure_filter {

class ExposureSink {
 public:
  virtual ~ExposureSink() = default;
  // Checks one message's exposures as RecordExposure would, changing
  // nothing: OutOfRange when an event time is outside what the surface
  // accepts (negative, beyond --max_future_skew, or older than the
  // retention window), InvalidArgument (naming the field) for anything else.
  virtual absl::Status Validate(
      const exposure::v1::RecordExposureRequest& message) = 0;
  // Records a batch of validated messages; OK only once it is durable (as
  // durable as an acknowledged RecordExposure).
  virtual absl::Status Record(
      const exposure::v1::RecordExposureRequest& batch) = 0;
  // Applies a delete_user record of the log (replication): as DeleteUser, on
  // this copy. InvalidArgument (naming the field) when the record can never
  // be applied (it is skipped as a bad message); any other error means the
  // store or its log refused it for now (it is retried, the partition
  // waits). OK only once it is durable.
  virtual absl::Status DeleteUser(
      const exposure::v1::DeleteUserRequest& request) = 0;
  // Applies a trace_add (`traced`) or trace_remove record of the log
  // (replication): as AddTracedUsers / RemoveTracedUsers of
  // `user.user_id()` on this copy, a trace_add with
  // `user.traced_since_ms()` as its traced_since.
  // ResourceExhausted when this copy traces --trace_max_users already (the
  // record is skipped and counted: a copy never stalls for a debugging
  // aid); InvalidArgument and the other errors as for DeleteUser.
  virtual absl::Status TraceUser(const exposure::v1::TracedUser& user,
                                 bool traced) = 0;
  // Per-call limits a batch must respect (RecordExposure's).
  virtual size_t max_exposures_per_batch() const = 0;
  virtual size_t max_items_per_batch() const = 0;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_INGEST_EXPOSURE_SINK_H_
