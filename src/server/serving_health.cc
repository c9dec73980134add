#include "src/server/serving_health.h"

#include <grpcpp/health_check_service_interface.h>

#include <utility>

namespace exposure_filter {

ServingHealth::ServingHealth(grpc::HealthCheckServiceInterface* health,
                             std::string service)
    : health_(health), service_(std::move(service)) {}

void ServingHealth::SetReadsReady(bool ready) {
  absl::MutexLock lock(&mu_);
  reads_ = ready;
  PublishLocked();
}

void ServingHealth::SetWritesReady(bool ready) {
  absl::MutexLock lock(&mu_);
  writes_ = ready;
  PublishLocked();
}

void ServingHealth::Stop() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  stopped_ = true;
  health_->SetServingStatus(service_, false);
  health_->SetServingStatus(false);
}

bool ServingHealth::serving() const {
  absl::MutexLock lock(&mu_);
  return !stopped_ && reads_ && writes_;
}

void ServingHealth::PublishLocked() {
  if (stopped_) return;
  // Under mu_: two conditions changing at once publish in the order they
  // were decided, so the last status set is the current one.
  const bool serving = reads_ && writes_;
  health_->SetServingStatus(service_, serving);
  health_->SetServingStatus(serving);
}

}  // namespace exposure_filter
