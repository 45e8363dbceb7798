#include "server/rpc/http_endpoint.h"

#include <httplib.h>
#include <sys/socket.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace wal {

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& listen, const Metrics* metrics, std::function<absl::Status()> health) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address '", listen, "' is not HOST:PORT"));
  }
  const std::string host = listen.substr(0, colon);
  std::unique_ptr<HttpEndpoint> self(new HttpEndpoint());
  self->server_ = std::make_unique<httplib::Server>();
  // httplib's default sets SO_REUSEPORT, which lets a second walserver bind the same address
  // and answer half of the scrapes: set SO_REUSEADDR instead (restarts past TIME_WAIT).
  self->server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  self->server_->Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  self->server_->Get("/healthz", [health](const httplib::Request&, httplib::Response& res) {
    const absl::Status status = health();
    res.status = status.ok() ? 200 : 503;
    res.set_content(status.ok() ? "ok\n" : std::string(status.message()) + "\n", "text/plain");
  });
  if (port == 0) {
    port = self->server_->bind_to_any_port(host);
    if (port <= 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  } else if (!self->server_->bind_to_port(host, port)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  self->address_ = absl::StrCat(host, ":", port);
  self->thread_ = std::thread([s = self->server_.get()] { s->listen_after_bind(); });
  return self;
}

HttpEndpoint::~HttpEndpoint() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace wal
