#include "server/kafka/client.h"

#include <algorithm>
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

}  // namespace

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
