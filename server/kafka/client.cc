#include "server/kafka/client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

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

// Without a user timeout, a connection that lived through a network cut waits out TCP's
// retransmission backoff after the cut heals (11-13 s after a 15 s cut, docs/RELIABILITY.md).
// With it, the kernel closes the connection once its bytes stay unacknowledged that long,
// librdkafka reconnects (at most --kafka.reconnect.backoff.max.ms apart, each attempt's SYNs
// bounded by the same timeout), and the first attempt after the heal gets through. A live
// broker, even one too busy to answer, acknowledges bytes within a round trip; a link whose
// queues hold more than the timeout needs a longer one.
std::atomic<unsigned int> user_timeout_ms{kDefaultKafkaUserTimeout.count()};

// librdkafka's socket_cb: its default (a close-on-exec socket) and the user timeout.
int OpenSocket(int domain, int type, int protocol, void* /*opaque*/) {
  const int fd = socket(domain, type | SOCK_CLOEXEC, protocol);
  if (fd < 0) return -1;
  const unsigned int ms = user_timeout_ms.load();
  if (ms > 0 && type == SOCK_STREAM && (domain == AF_INET || domain == AF_INET6)) {
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
  }
  return fd;
}

}  // namespace

void SetKafkaUserTimeout(std::chrono::milliseconds timeout) {
  user_timeout_ms.store(static_cast<unsigned int>(timeout.count()));
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
