// A TCP proxy on 127.0.0.1 in front of one upstream address, for network faults between a
// client and walserver. BlackHoleExisting() turns every connection open at that moment into a
// black hole: bytes are taken in and dropped both ways, with no FIN and no RST, as when a NAT or
// load-balancer entry is dropped or the peer's host loses power. Connections made afterwards
// work, so a client that notices and reconnects gets through. Slow() makes the link slow both
// ways: every byte arrives `latency` after it was sent, and at most `bytes_per_second` pass.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"

namespace wal::testing {

class TcpProxy {
 public:
  // `upstream` is HOST:PORT with a numeric IPv4 host.
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(const std::string& upstream);
  ~TcpProxy();  // closes every connection

  // 127.0.0.1:PORT to connect to.
  const std::string& address() const { return address_; }
  // Connections accepted so far.
  int connections() const { return accepted_.load(); }
  void BlackHoleExisting();
  // Closes every open connection at both ends, as a restarted server or a reset would; later
  // connections pass as before.
  void CutExisting();
  // Every connection, open or made later: an address nothing answers at any more.
  void BlackHoleAll();
  // For connections accepted afterwards. 0 bytes_per_second: no limit.
  void Slow(std::chrono::milliseconds latency, int64_t bytes_per_second);

 private:
  TcpProxy() = default;
  void Accept();
  // Copies between the two sockets of connection `id` until both sides have ended, either
  // resets, or the proxy stops. A side's end reaches the other side after every byte it sent
  // before it, and the other direction stays open meanwhile (TCP's half-close). Drops what it
  // reads, ends included, once the connection is black-holed.
  void Pump(int id, int client_fd, int upstream_fd);

  std::string address_;
  std::string upstream_host_;
  uint16_t upstream_port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> black_holed_below_{0};  // connections with a lower id are black holes
  std::atomic<int64_t> latency_ms_{0};
  std::atomic<int64_t> bytes_per_second_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);  // shut down at stop, which ends blocked writes
};

}  // namespace wal::testing
