// The start-up and shutdown of the bench servers that answer without filter
// work (transport-ceiling-server, unary-api-probe).
//
// Both stand in for exposure-filter-server in a measurement of the
// transport alone, so both must start as it does: its flags, message limit,
// transport tuning, malloc and mutex settings. Kept in one place so that a
// setting added for one of them cannot be missing from the other and skew
// the comparison between them.
#ifndef EXPOSURE_FILTER_BENCH_NO_WORK_SERVER_H_
#define EXPOSURE_FILTER_BENCH_NO_WORK_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "src/server/config/server_flags.h"

namespace exposure_filter::bench {

// Call first in main, before any thread starts: blocks SIGTERM and SIGINT
// (WaitForStopThenShutdown takes them with sigwait, and threads started
// later inherit the mask), applies the real server's mutex and malloc
// settings, parses the flags and reads ServerConfig from them. After a bad
// flag, prints "<program>: <why>" and returns nullopt (exit status 2).
std::optional<ServerConfig> NoWorkServerConfig(const char* program, int argc,
                                               char** argv);

// A ServerBuilder listening on config.listen_address as
// exposure-filter-server does (message limit, no SO_REUSEPORT, transport
// tuning). The program registers its services and completion queues on
// builder(), then calls Start.
class NoWorkServerBuilder {
 public:
  NoWorkServerBuilder(const char* program, const ServerConfig& config);

  NoWorkServerBuilder(const NoWorkServerBuilder&) = delete;
  NoWorkServerBuilder& operator=(const NoWorkServerBuilder&) = delete;

  grpc::ServerBuilder& builder() { return builder_; }

  // Builds and starts the server; nullptr, after printing "<program>:
  // cannot listen on <address>", when that failed or no port was bound.
  std::unique_ptr<grpc::Server> Start();

  // The port bound, once Start returned a server.
  int port() const { return port_; }

 private:
  const char* const program_;
  const std::string listen_address_;
  grpc::ServerBuilder builder_;
  int port_ = 0;
};

// Returns once SIGTERM or SIGINT arrived and the server shut down (calls
// still running get 2 s).
void WaitForStopThenShutdown(grpc::Server* server);

}  // namespace exposure_filter::bench

#endif  // EXPOSURE_FILTER_BENCH_NO_WORK_SERVER_H_
