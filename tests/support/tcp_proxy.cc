#include "tests/support/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace wal::testing {
namespace {

sockaddr_in Ipv4(const std::string& host, uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  return address;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(const std::string& upstream) {
  auto proxy = std::unique_ptr<TcpProxy>(new TcpProxy());
  const size_t colon = upstream.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(upstream.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("not HOST:PORT: ", upstream));
  }
  proxy->upstream_host_ = upstream.substr(0, colon);
  proxy->upstream_port_ = static_cast<uint16_t>(port);
  proxy->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = Ipv4("127.0.0.1", 0);
  socklen_t length = sizeof(address);
  if (bind(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(proxy->listen_fd_, 64) != 0 ||
      getsockname(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return absl::InternalError(absl::StrCat("proxy cannot listen: errno ", errno));
  }
  proxy->address_ = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  proxy->acceptor_ = std::thread([p = proxy.get()] { p->Accept(); });
  return proxy;
}

TcpProxy::~TcpProxy() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> pumps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    pumps.swap(pumps_);
  }
  for (std::thread& t : pumps) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : fds_) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void TcpProxy::BlackHoleExisting() { black_holed_below_ = accepted_.load(); }

void TcpProxy::CutExisting() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : fds_) shutdown(fd, SHUT_RDWR);
}

void TcpProxy::BlackHoleAll() { black_holed_below_ = std::numeric_limits<int>::max(); }

void TcpProxy::Slow(std::chrono::milliseconds latency, int64_t bytes_per_second) {
  latency_ms_ = latency.count();
  bytes_per_second_ = bytes_per_second;
}

void TcpProxy::Accept() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const int client_fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client_fd < 0) continue;
    const int id = accepted_++;  // before the upstream connect, which BlackHoleExisting may race
    const int upstream_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const sockaddr_in upstream = Ipv4(upstream_host_, upstream_port_);
    if (connect(upstream_fd, reinterpret_cast<const sockaddr*>(&upstream), sizeof(upstream)) != 0) {
      close(upstream_fd);
      close(client_fd);  // as if the server refused
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(client_fd);
    fds_.push_back(upstream_fd);
    pumps_.emplace_back([this, id, client_fd, upstream_fd] { Pump(id, client_fd, upstream_fd); });
  }
}

void TcpProxy::Pump(int id, int client_fd, int upstream_fd) {
  using Clock = std::chrono::steady_clock;
  const auto latency = std::chrono::milliseconds(latency_ms_.load());
  const int64_t rate = bytes_per_second_.load();
  const int sockets[2] = {client_fd, upstream_fd};
  // Per direction (by the side it comes from), what was read and when it is due at the other
  // side, in order.
  struct Chunk {
    Clock::time_point due;
    std::string bytes;
  };
  std::deque<Chunk> pending[2];
  Clock::time_point transmitted[2] = {};  // when the link has carried what was read so far
  bool reading[2] = {true, true};         // until the side's end has been read
  bool ended[2] = {false, false};         // the side's end was passed on, or swallowed
  std::vector<char> buffer(64 * 1024);
  while (!stop_) {
    // Send what is due; wait for the next due chunk or new bytes.
    int wait_ms = 50;
    const auto now = Clock::now();
    for (int from = 0; from < 2; ++from) {
      const int to = 1 - from;
      std::deque<Chunk>& queue = pending[from];
      while (!queue.empty() && queue.front().due <= now) {
        if (!WriteAll(sockets[to], queue.front().bytes.data(), queue.front().bytes.size())) {
          shutdown(sockets[from], SHUT_RDWR);
          return;
        }
        queue.pop_front();
      }
      if (!queue.empty()) {
        const auto until = std::chrono::ceil<std::chrono::milliseconds>(queue.front().due - now);
        wait_ms = std::min<int>(wait_ms, static_cast<int>(until.count()));
      } else if (!reading[from] && !ended[from]) {
        // Everything the side sent before its end has arrived: now its end, as TCP delivers a
        // FIN after the bytes before it. The other direction stays open (a half-close).
        shutdown(sockets[to], SHUT_WR);
        ended[from] = true;
      }
    }
    if (ended[0] && ended[1]) return;
    pollfd fds[2] = {{reading[0] ? sockets[0] : -1, POLLIN, 0},
                     {reading[1] ? sockets[1] : -1, POLLIN, 0}};
    if (poll(fds, 2, wait_ms) <= 0) continue;
    for (int from = 0; from < 2; ++from) {
      if (fds[from].revents == 0) continue;
      const int to = 1 - from;
      const ssize_t n = recv(sockets[from], buffer.data(), buffer.size(), 0);
      const bool black_hole = id < black_holed_below_.load();
      if (n <= 0 && black_hole) {
        // The end is swallowed too: the other side never hears of it.
        reading[from] = false;
        ended[from] = true;
        continue;
      }
      if (n == 0) {
        reading[from] = false;  // passed on above once what came before it has arrived
        continue;
      }
      if (n < 0) {
        // A reset: the connection is over both ways, as a real one would be.
        shutdown(sockets[to], SHUT_RDWR);
        return;
      }
      if (black_hole) continue;  // swallowed
      if (latency.count() == 0 && rate == 0) {
        if (!WriteAll(sockets[to], buffer.data(), static_cast<size_t>(n))) {
          shutdown(sockets[from], SHUT_RDWR);
          return;
        }
        continue;
      }
      // The link carries the bytes after those read before them, at `rate`; they arrive
      // `latency` later. What the proxy holds meanwhile is unbounded: for tests, not floods.
      Clock::time_point carried = Clock::now();
      if (rate > 0) {
        transmitted[from] =
            std::max(transmitted[from], carried) + std::chrono::microseconds(n * 1000000 / rate);
        carried = transmitted[from];
      }
      pending[from].push_back(
          {carried + latency, std::string(buffer.data(), static_cast<size_t>(n))});
    }
  }
}

}  // namespace wal::testing
