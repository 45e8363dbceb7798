// Kafka clients: librdkafka handles created from the server's common properties, with
// librdkafka's log routed to spdlog. One header per role: producer.h, consumer.h, admin.h,
// mock_cluster.h; errors.h turns librdkafka errors into statuses.
#pragma once

#include <librdkafka/rdkafka.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/common/deadline.h"

namespace wal {

struct KafkaHandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using KafkaHandle = std::unique_ptr<rd_kafka_t, KafkaHandleDeleter>;

// librdkafka properties common to every client of one server (bootstrap.servers, security and
// any pass-through settings); each client adds its own on top.
using KafkaProperties = std::map<std::string, std::string>;

// The librdkafka this process runs, as rd_kafka_version_str() reports it (e.g. "2.12.1"): the
// shared library loaded, which may differ from the headers walserver was built with.
std::string LibrdkafkaVersion();

// A caller's deadline, none (max()) bounded by kKafkaRequestTimeout: nothing in kafka/ waits on
// Kafka without end.
Clock::time_point Bounded(Clock::time_point deadline);

// librdkafka's timeout for a wait until `deadline` (Bounded): at least 1 ms (0 would not wait at
// all), at most an hour (so that slack added to a wait cannot overflow). The one place a
// deadline becomes a timeout; used only inside kafka/.
int TimeoutMs(Clock::time_point deadline);

// Kafka connections whose sent bytes stay unacknowledged this long are closed by the kernel
// (TCP_USER_TIMEOUT), for the clients NewKafkaClient makes from then on in this process; zero
// leaves the kernel's default (about 15 minutes of retransmissions). See client.cc for why.
inline constexpr std::chrono::milliseconds kDefaultKafkaUserTimeout{2000};
void SetKafkaUserTimeout(std::chrono::milliseconds timeout);

// Creates a client of `type` with `properties`; `customize` may add callbacks to the conf.
absl::StatusOr<KafkaHandle> NewKafkaClient(
    rd_kafka_type_t type, const KafkaProperties& properties,
    const std::function<void(rd_kafka_conf_t*)>& customize = nullptr);

}  // namespace wal
