#include "bench/no_work_server.h"

#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>

#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "src/server/config/malloc_tuning.h"
#include "src/server/config/transport_tuning.h"

namespace exposure_filter::bench {
namespace {

sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

}  // namespace

std::optional<ServerConfig> NoWorkServerConfig(const char* program, int argc,
                                               char** argv) {
  const sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // The same malloc and mutex settings as the real server (malloc_tuning.h,
  // main.cc): these servers measure the transport it runs on, and gRPC's
  // own mutexes are Abseil's, so with Debian's deadlock detection on they
  // fed its lock graph (~8% of the ceiling server's samples at one small
  // call at a time) where the real server's do not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  ApplyMallocTuning();
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<ServerConfig> config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "%s: %s\n", program,
                 std::string(config.status().message()).c_str());
    return std::nullopt;
  }
  return *std::move(config);
}

NoWorkServerBuilder::NoWorkServerBuilder(const char* program,
                                         const ServerConfig& config)
    : program_(program), listen_address_(config.listen_address) {
  // The same settings exposure_filter_server.cc applies.
  builder_.AddListeningPort(config.listen_address,
                            grpc::InsecureServerCredentials(), &port_);
  builder_.SetMaxReceiveMessageSize(config.max_receive_message_bytes);
  builder_.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  ApplyTransportTuning(config.transport, &builder_);
}

std::unique_ptr<grpc::Server> NoWorkServerBuilder::Start() {
  std::unique_ptr<grpc::Server> server = builder_.BuildAndStart();
  if (server == nullptr || port_ == 0) {
    std::fprintf(stderr, "%s: cannot listen on %s\n", program_,
                 listen_address_.c_str());
    return nullptr;
  }
  return server;
}

void WaitForStopThenShutdown(grpc::Server* server) {
  const sigset_t signals = StopSignals();
  int sig = 0;
  sigwait(&signals, &sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

}  // namespace exposure_filter::bench
