#include "src/server/observability/admin_http_server.h"

#include <prometheus/exposer.h>

#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace exposure_filter {

absl::StatusOr<std::unique_ptr<AdminHttpServer>> AdminHttpServer::Start(
    const std::string& address,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& metrics) {
  // civetweb takes numeric addresses only.
  absl::string_view port_part = address;
  std::string bind = address;
  if (absl::ConsumePrefix(&port_part, "localhost:")) {
    bind = absl::StrCat("127.0.0.1:", port_part);
  }
  if (!absl::StrContains(bind, ':')) {
    return absl::InvalidArgumentError(
        absl::StrCat("--admin_listen: \"", address, "\" is not host:port"));
  }
  std::unique_ptr<AdminHttpServer> s(new AdminHttpServer());
  try {
    // Two threads: Prometheus scrapes one at a time; the second lets a slow
    // scraper not block another (or a human with curl).
    s->exposer_ = std::make_unique<prometheus::Exposer>(bind, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on admin address ", address, ": ", e.what()));
  }
  const std::vector<int> ports = s->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on admin address ", address));
  }
  s->port_ = ports.front();
  for (const auto& m : metrics) s->exposer_->RegisterCollectable(m);
  return s;
}

AdminHttpServer::~AdminHttpServer() = default;

}  // namespace exposure_filter
