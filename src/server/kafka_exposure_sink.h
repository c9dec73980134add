// KafkaExposureSink: the Kafka consumer's way into the store. It
// records through ExposureFilterHandlers::RecordLoggedExposure, the RPC's
// own path, so Kafka and gRPC writes get the same validation, limits, traced
// users, write-ahead log commit and metrics; only a replicated deployment
// tells them apart, taking writes from the log alone.
#ifndef EXPOSURE_FILTER_SRC_SERVER_KAFKA_EXPOSURE_SINK_H_
#define EXPOSURE_FILTER_SRC_SERVER_KAFKA_EXPOSURE_SINK_H_

#include "src/ingest/exposure_sink.h"
#include "src/server/config/server_config.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {

class KafkaExposureSink final : public ExposureSink {
 public:
  KafkaExposureSink(ExposureFilterHandlers* handlers, SurfaceRegistry* surfaces,
                    const ShardedFilterStore* store,
                    const RequestLimits& limits)
      : handlers_(handlers),
        surfaces_(surfaces),
        store_(store),
        limits_(limits) {}

  absl::Status Validate(
      const exposure::v1::RecordExposureRequest& message) override;
  absl::Status Record(
      const exposure::v1::RecordExposureRequest& batch) override;
  absl::Status DeleteUser(
      const exposure::v1::DeleteUserRequest& request) override;
  absl::Status TraceUser(const exposure::v1::TracedUser& user,
                         bool traced) override;
  size_t max_exposures_per_batch() const override {
    return limits_.max_exposures_per_request;
  }
  size_t max_items_per_batch() const override {
    return limits_.max_items_per_request;
  }

 private:
  ExposureFilterHandlers* const handlers_;
  SurfaceRegistry* const surfaces_;
  const ShardedFilterStore* const store_;
  const RequestLimits limits_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_KAFKA_EXPOSURE_SINK_H_
