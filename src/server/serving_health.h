// ServingHealth: the one place that sets this replica's gRPC health
// status (Kubernetes readiness) once it has started. Two conditions feed it
// from their own threads:
//   reads   ServingReadiness' lag decision (--replication_factor >= 2), or
//           true when reads are not gated;
//   writes  false while the exposure log producer is rebuilt after a fatal
//           error (exposure_log_producer.h): the write RPCs cannot be taken.
// SERVING only while both hold. Kept apart so neither monitor can flip the
// other's NOT_SERVING back: the lag monitor would otherwise announce
// SERVING on its next change while writes are still refused.
// Stop() (shutdown's drain) says NOT_SERVING for good.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SERVING_HEALTH_H_
#define EXPOSURE_FILTER_SRC_SERVER_SERVING_HEALTH_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace grpc {
class HealthCheckServiceInterface;
}  // namespace grpc

namespace exposure_filter {

class ServingHealth {
 public:
  // `health` (the server's) must outlive every call but Stop's successors,
  // which do nothing. Publishes nothing until a condition is set.
  ServingHealth(grpc::HealthCheckServiceInterface* health, std::string service);

  void SetReadsReady(bool ready) ABSL_LOCKS_EXCLUDED(mu_);
  void SetWritesReady(bool ready) ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_SERVING from now on; later Set* calls change nothing. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  bool serving() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::HealthCheckServiceInterface* const health_;
  const std::string service_;
  mutable absl::Mutex mu_;
  bool reads_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_ ABSL_GUARDED_BY(mu_) = true;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SERVING_HEALTH_H_
