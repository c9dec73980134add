#include "src/server/observability/protobuf_log.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "src/base/log_rate_limiter.h"

namespace exposure_filter {
namespace {

void ProtobufLogToSpdlog(google::protobuf::LogLevel level, const char* filename,
                         int line, const std::string& message) {
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      spdlog::debug("event=protobuf_log file={}:{} msg=\"{}\"", filename, line,
                    message);
      return;
    case google::protobuf::LOGLEVEL_FATAL:
      spdlog::critical("event=protobuf_log file={}:{} msg=\"{}\"", filename,
                       line, message);
      return;
    default: {
      static LogRateLimiter limiter(absl::Seconds(10));
      uint64_t suppressed = 0;
      if (limiter.Allow(&suppressed)) {
        spdlog::warn("event=protobuf_log file={}:{} msg=\"{}\" suppressed={}",
                     filename, line, message, suppressed);
      }
    }
  }
}

}  // namespace

void RouteProtobufLogsToSpdlog() {
  google::protobuf::SetLogHandler(&ProtobufLogToSpdlog);
}

}  // namespace exposure_filter
