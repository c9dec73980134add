// exposure-filter-server: parses flags, starts the server, and shuts it down
// cleanly on SIGTERM/SIGINT (SIGHUP is logged and ignored).
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <thread>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "src/server/config/malloc_tuning.h"
#include "src/server/config/server_flags.h"
#include "src/server/exposure_filter_server.h"
#include "src/server/observability/protobuf_log.h"

int main(int argc, char** argv) {
  using namespace exposure_filter;
  absl::SetProgramUsageMessage(
      "exposure-filter-server: per-user exposure filters over gRPC.\n"
      "Every flag can also be set as EXPOSURE_FILTER_<FLAG> in the "
      "environment.\nUsage: exposure-filter-server [--listen=host:port] ...");
  // --help lists our flags (defined under src/server/), not gRPC's or absl's.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "src/server/");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  // Block the termination signals, and SIGHUP, in every thread (threads
  // inherit the mask); one dedicated thread receives them with sigwait, so
  // Shutdown never runs inside a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (absl::Status s = ApplyEnvironmentOverrides(); !s.ok()) {
    std::fprintf(stderr, "exposure-filter-server: %s\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with absl::Mutex deadlock detection on, a debug
  // aid that updates a global lock graph on every Lock() (it showed in the
  // RecordExposure profile: ~50 shard and log locks per call). The test
  // suites keep it; the server does not pay for it on every request.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Before any thread starts: keep freed memory in the heap between
  // requests instead of faulting it back in (malloc_tuning.h).
  ApplyMallocTuning();
  const spdlog::level::level_enum level =
      spdlog::level::from_str(LogLevelFlag());
  if (level == spdlog::level::off && LogLevelFlag() != "off") {
    std::fprintf(stderr, "exposure-filter-server: unknown --log_level %s\n",
                 LogLevelFlag().c_str());
    return 2;
  }
  spdlog::set_level(level);
  // One line per event, UTC timestamps, logfmt-style key=value messages
  // ("event=shutdown_complete rpcs_ok=..."), so logs parse without regexes.
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%fZ level=%l %v",
                      spdlog::pattern_time_type::utc);
  // Requests that do not parse make libprotobuf log per request: rate-limit
  // those lines like our own.
  RouteProtobufLogsToSpdlog();
  absl::StatusOr<ServerConfig> config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "exposure-filter-server: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  static SystemClock clock;
  absl::StatusOr<std::unique_ptr<ExposureFilterServer>> server =
      ExposureFilterServer::Start(*config, &clock);
  if (!server.ok()) {
    spdlog::critical(
        "event=start_failed status=\"{}\"",
        server.status().ToString(absl::StatusToStringMode::kWithNoExtraData));
    return 1;
  }
  spdlog::info("event=serving port={} admin_port={} {}", (*server)->port(),
               (*server)->admin_port(), config->Summary());
  std::thread signal_waiter([&] {
    int sig = 0;
    // Operators send SIGHUP expecting a reload. This server reads its
    // configuration (flags, TLS files, the authorization policy) at startup
    // only, so a HUP is logged as ignored and the server keeps serving; a
    // restart applies a change. Left at its default action, HUP would end
    // the process at once: no drain, no final snapshot.
    while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
      spdlog::warn(
          "event=signal signal=SIGHUP action=ignored reason=\"configuration "
          "is read at startup only; restart the server to apply a change\"");
    }
    spdlog::info("event=signal signal={}",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT");
    (*server)->Shutdown();
  });
  (*server)->Wait();
  signal_waiter.join();
  server->reset();
  return 0;
}
