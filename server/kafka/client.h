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

// TCP retransmits on Kafka connections at least this often (TCP_RTO_MAX_MS, Linux 6.15 and
// later; 1000-120000 ms), so that appends come back about a second after a network cut heals
// (client.cc says why). Zero leaves the kernel's cap (120 s). One setting for the whole
// process: every connection NewKafkaClient's clients make from then on, reconnections too.
inline constexpr std::chrono::milliseconds kDefaultKafkaRtoMax{1000};
void SetKafkaRtoMax(std::chrono::milliseconds cap);
// Whether this kernel takes the cap (older ones keep TCP's own backoff).
bool KernelCapsRto();

// Shuts down every connection this process's clients hold to the broker `address` (its
// advertised "host:port"), as a network failure would; librdkafka fails their requests in
// flight, asks another broker for metadata while that one is down, and connects again. How
// walserver stops waiting on a leader that goes on naming itself after the others chose a new
// one (stale_leaders.h). Returns how many it shut down.
int DropConnectionsTo(const std::string& address);

// Creates a client of `type` with `properties`; `customize` may add callbacks to the conf.
absl::StatusOr<KafkaHandle> NewKafkaClient(
    rd_kafka_type_t type, const KafkaProperties& properties,
    const std::function<void(rd_kafka_conf_t*)>& customize = nullptr);

}  // namespace wal
