#include "server/kafka/client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace wal {

namespace {

void LogFromKafka(const rd_kafka_t* rk, int level, const char* facility, const char* message) {
  // syslog levels: 0-3 error, 4 warning, 5-6 info, 7 debug.
  const auto spd_level = level <= 3   ? spdlog::level::err
                         : level == 4 ? spdlog::level::warn
                         : level <= 6 ? spdlog::level::info
                                      : spdlog::level::debug;
  spdlog::log(spd_level, "librdkafka {} {}: {}", rd_kafka_name(rk), facility, message);
}

// Linux 6.15's per-socket cap on the retransmission timeout (linux/tcp.h), which Debian 12's
// headers predate. Older kernels refuse it (ENOPROTOOPT) and keep their 120 s cap.
#ifndef TCP_RTO_MAX_MS
#define TCP_RTO_MAX_MS 44
#endif

// Without a cap, a connection that lived through a network cut waits out TCP's doubling
// retransmission interval after the cut heals (11-13 s after a 15 s cut, docs/RELIABILITY.md).
// With it, TCP retransmits at least that often, and the first retransmission after the heal
// gets through. It changes only how often TCP tries: unlike a user timeout it never closes a
// connection to a broker that is slow or has stopped reading for a while.
std::atomic<int> rto_max_ms{static_cast<int>(kDefaultKafkaRtoMax.count())};

// librdkafka's socket_cb: its default (a close-on-exec socket) and the cap.
int OpenSocket(int domain, int type, int protocol, void* /*opaque*/) {
  const int fd = socket(domain, type | SOCK_CLOEXEC, protocol);
  if (fd < 0) return -1;
  const int ms = rto_max_ms.load();
  if (ms > 0 && type == SOCK_STREAM && (domain == AF_INET || domain == AF_INET6)) {
    setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &ms, sizeof(ms));  // best effort
  }
  return fd;
}

// Every open Kafka connection's socket and the broker it goes to, for DropConnectionsTo. A
// socket leaves before librdkafka closes it, under the same lock that a drop shuts it down
// under, so a drop never touches a number the kernel gave to something else.
struct Connections {
  std::mutex mu;
  absl::flat_hash_map<int, std::string> broker_of ABSL_GUARDED_BY(mu);
};
Connections& OpenConnections() {
  static auto* connections = new Connections();
  return *connections;
}

// librdkafka's connect_cb: its default (a non-blocking connect), remembering the broker.
int ConnectSocket(int fd, const struct sockaddr* address, int length, const char* broker,
                  void* /*opaque*/) {
  {
    Connections& c = OpenConnections();
    std::lock_guard<std::mutex> lock(c.mu);
    c.broker_of[fd] = broker;
  }
  if (connect(fd, address, static_cast<socklen_t>(length)) == 0 || errno == EINPROGRESS) return 0;
  return errno;
}

int CloseSocket(int fd, void* /*opaque*/) {
  Connections& c = OpenConnections();
  std::lock_guard<std::mutex> lock(c.mu);
  c.broker_of.erase(fd);
  return close(fd);
}

}  // namespace

int DropConnectionsTo(const std::string& address) {
  Connections& c = OpenConnections();
  std::lock_guard<std::mutex> lock(c.mu);
  int dropped = 0;
  for (const auto& [fd, broker] : c.broker_of) {
    if (broker == address && shutdown(fd, SHUT_RDWR) == 0) ++dropped;
  }
  return dropped;
}

void SetKafkaRtoMax(std::chrono::milliseconds cap) {
  rto_max_ms.store(static_cast<int>(cap.count()));
}

bool KernelCapsRto() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int ms = static_cast<int>(kDefaultKafkaRtoMax.count());
  const bool capped = setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &ms, sizeof(ms)) == 0;
  close(fd);
  return capped;
}

std::string LibrdkafkaVersion() { return rd_kafka_version_str(); }

absl::StatusOr<KafkaHandle> NewKafkaClient(rd_kafka_type_t type, const KafkaProperties& properties,
                                           const std::function<void(rd_kafka_conf_t*)>& customize) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[512];
  for (const auto& [key, value] : properties) {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return absl::InvalidArgumentError(
          absl::StrCat("Kafka property ", key, "=", value, ": ", errstr));
    }
  }
  rd_kafka_conf_set_log_cb(conf, LogFromKafka);
  rd_kafka_conf_set_socket_cb(conf, OpenSocket);
  rd_kafka_conf_set_connect_cb(conf, ConnectSocket);
  rd_kafka_conf_set_closesocket_cb(conf, CloseSocket);
  if (customize) customize(conf);
  rd_kafka_t* rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    return absl::InvalidArgumentError(absl::StrCat("creating a Kafka client: ", errstr));
  }
  return KafkaHandle(rk);
}

Clock::time_point Bounded(Clock::time_point deadline) {
  return deadline == Clock::time_point::max() ? Clock::now() + kKafkaRequestTimeout : deadline;
}

int TimeoutMs(Clock::time_point deadline) {
  constexpr int64_t kHourMs = 3600 * 1000;
  const int64_t left =
      std::chrono::duration_cast<std::chrono::milliseconds>(Bounded(deadline) - Clock::now())
          .count();
  return static_cast<int>(std::clamp<int64_t>(left, 1, kHourMs));
}

}  // namespace wal
