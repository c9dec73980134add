#include "src/ingest/kafka_event_logger.h"

#include <librdkafka/rdkafkacpp.h>
#include <spdlog/spdlog.h>

#include "absl/time/time.h"
#include "src/base/log_rate_limiter.h"

namespace exposure_filter {
namespace {

// One error line per interval, with the count held back.
constexpr absl::Duration kLogInterval = absl::Seconds(10);

class KafkaEventLoggerCb final : public RdKafka::EventCb {
 public:
  void event_cb(RdKafka::Event& event) override {
    switch (event.type()) {
      case RdKafka::Event::EVENT_ERROR: {
        uint64_t suppressed = 0;
        if (limiter_.Allow(&suppressed)) {
          spdlog::warn("kafka: {} ({} similar suppressed)", event.str(),
                       suppressed);
        }
        break;
      }
      case RdKafka::Event::EVENT_LOG:
        if (event.severity() <= RdKafka::Event::EVENT_SEVERITY_WARNING) {
          spdlog::warn("kafka: {} {}", event.fac(), event.str());
        } else {
          spdlog::debug("kafka: {} {}", event.fac(), event.str());
        }
        break;
      default:
        break;
    }
  }

 private:
  LogRateLimiter limiter_{kLogInterval};
};

}  // namespace

RdKafka::EventCb& KafkaEventLogger() {
  static auto* logger = new KafkaEventLoggerCb();
  return *logger;
}

}  // namespace exposure_filter
