// A whole walserver: its core (wal_core.h: Kafka, the namespace table, the writer and reader),
// then the gRPC server, the HTTP endpoint and the pruner, torn down in reverse.
// main.cc builds one from flags; tests build them in-process.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server.h"
#include "server/meta/pruner.h"
#include "server/rpc/callback_threads_awake.h"
#include "server/rpc/health_service.h"
#include "server/rpc/http_endpoint.h"
#include "server/rpc/wal_service.h"
#include "server/server_options.h"
#include "server/wal_core.h"

namespace wal {

// The shortest interval between a client's pings walserver accepts; a client that pings more
// often is sent GOAWAY (too_many_pings). walclient's keepalive may not be set below it.
inline constexpr std::chrono::milliseconds kMinClientPingInterval{1000};

class WalServer {
 public:
  // Validates the options (INVALID_ARGUMENT), prepares topics, loads the namespace table and
  // starts serving. Blocks until it serves or fails.
  static absl::StatusOr<std::unique_ptr<WalServer>> Start(ServerOptions options);
  ~WalServer();  // Shutdown()

  // Stops accepting calls, cancels the rest after a grace period, and closes Kafka clients.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));

  // The first gRPC address listened on (with the port resolved when 0 was asked for).
  const std::string& address() const { return addresses_.front(); }
  const std::vector<std::string>& addresses() const { return addresses_; }
  // HOST:PORT of /metrics and /healthz; empty when off.
  std::string http_address() const { return http_ ? http_->address() : ""; }
  uint64_t max_entry_bytes() const { return core_->max_entry_bytes(); }
  MockCluster* mock_cluster() const { return core_->mock_cluster(); }
  const EntryReader& reader() const { return core_->reader(); }
  const Metrics& metrics() const { return core_->metrics(); }
  const EntryWriter& writer() const { return core_->writer(); }
  const RetriedEntries& retried_entries() const { return core_->retried(); }

 private:
  WalServer() = default;

  // Takes unix_socket_locks_ for the unix sockets of --listen: Start's first step.
  absl::Status ClaimUnixSockets(const ServerOptions& o);
  // The steps of Start after the core's, in order.
  absl::Status StartGrpc(const ServerOptions& o);
  absl::Status Announce(const ServerOptions& o);  // this server's name in the metadata topic
  absl::Status StartHttpAndPruner(const ServerOptions& o);
  absl::StatusOr<ServiceOptions> MakeServiceOptions(const ServerOptions& o) const;
  void AddCollectors();

  std::vector<std::string> addresses_;
  // Held while this server serves unix sockets: an flock on "<socket>.lock" each, taken before
  // the check for a live listener, so that of two servers starting on one socket at the same
  // moment one is refused (the check and the bind are two steps).
  std::vector<int> unix_socket_locks_;
  std::unique_ptr<WalCore> core_;  // closed by Shutdown; its metrics' counters stay readable
  std::unique_ptr<WalServiceImpl> service_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<CallbackThreadsAwake> awake_;  // while server_ serves
  std::unique_ptr<HttpEndpoint> http_;
  std::unique_ptr<Pruner> pruner_;
};

}  // namespace wal
