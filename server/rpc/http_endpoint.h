// The operator's HTTP port: Prometheus /metrics and /healthz, apart from the gRPC port.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/common/metrics.h"

namespace httplib {
class Server;
}

namespace wal {

class HttpEndpoint {
 public:
  // Listens on HOST:PORT (port 0: a free one). `health` decides /healthz: 200 when OK, else 503
  // with the status message.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& listen,
                                                             const Metrics* metrics,
                                                             std::function<absl::Status()> health);
  ~HttpEndpoint();

  // HOST:PORT actually listened on.
  const std::string& address() const { return address_; }

 private:
  HttpEndpoint() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
};

}  // namespace wal
