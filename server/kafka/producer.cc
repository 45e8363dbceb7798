#include "server/kafka/producer.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/kafka/errors.h"
#include "spdlog/spdlog.h"

namespace wal {

absl::StatusOr<std::unique_ptr<Producer>> Producer::Create(const KafkaProperties& properties,
                                                           std::string name) {
  std::unique_ptr<Producer> producer(new Producer(name));
  KafkaProperties props = properties;
  props["client.id"] = name;
  props["enable.idempotence"] = "true";
  props["acks"] = "all";
  auto rk = NewKafkaClient(RD_KAFKA_PRODUCER, props, [&](rd_kafka_conf_t* conf) {
    rd_kafka_conf_set_dr_msg_cb(conf, &Producer::OnDeliveryReport);
    rd_kafka_conf_set_error_cb(conf, &Producer::OnError);
    rd_kafka_conf_set_stats_cb(conf, &Producer::OnStats);
    rd_kafka_conf_set_opaque(conf, producer.get());
  });
  if (!rk.ok()) return rk.status();
  producer->rk_ = std::move(*rk);
  // Delivery reports, errors and statistics all arrive on this one thread.
  producer->poll_thread_ = std::thread([p = producer.get()] {
    while (!p->stop_.load()) rd_kafka_poll(p->rk_.get(), 100);
  });
  return producer;
}

Producer::~Producer() {
  // Give queued records a moment to reach Kafka, then fail the rest so that every handler hears
  // back before the handle goes away.
  rd_kafka_flush(rk_.get(), 5000);
  rd_kafka_purge(rk_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_flush(rk_.get(), 1000);
  stop_.store(true);
  poll_thread_.join();
  rd_kafka_poll(rk_.get(), 0);
  for (auto& [name, rkt] : topics_) rd_kafka_topic_destroy(rkt);
}

absl::Status Producer::Prepare(const std::vector<std::string>& topics, Clock::time_point deadline) {
  for (const std::string& topic : topics) {
    if (topics_.count(topic)) continue;
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk_.get(), topic.c_str(), nullptr);
    topics_[topic] = rkt;
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk_.get(), 0, rkt, &md, TimeoutMs(deadline));
    if (err) return KafkaErrorToStatus(err, absl::StrCat("looking up topic ", topic));
    rd_kafka_metadata_destroy(md);
  }
  return absl::OkStatus();
}

absl::Status Producer::Produce(const std::string& topic, int32_t partition, std::string_view key,
                               std::string_view value, DeliveryHandler* handler) {
  // A prepared topic's handle spares librdkafka a lookup by name per record.
  auto it = topics_.find(topic);
  rd_kafka_resp_err_t err =
      it != topics_.end()
          ? rd_kafka_producev(rk_.get(), RD_KAFKA_V_RKT(it->second),
                              RD_KAFKA_V_PARTITION(partition),
                              RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
                              RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                              RD_KAFKA_V_OPAQUE(handler), RD_KAFKA_V_END)
          : rd_kafka_producev(rk_.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                              RD_KAFKA_V_PARTITION(partition),
                              RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
                              RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                              RD_KAFKA_V_OPAQUE(handler), RD_KAFKA_V_END);
  return KafkaErrorToStatus(err, absl::StrCat("producing to ", topic, "[", partition, "]"));
}

Delivery Delivery::Of(rd_kafka_resp_err_t err, rd_kafka_msg_status_t status, int64_t offset) {
  Delivery d;
  d.err = err;
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    d.offset = offset;
    return d;
  }
  // A timeout or a purge in flight says nothing about what the broker did with what was sent;
  // any other failure is as librdkafka's status says (a record purged from the queue after an
  // earlier attempt to send it is not NOT_PERSISTED either).
  const bool unknown = err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT ||
                       err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT ||
                       status != RD_KAFKA_MSG_STATUS_NOT_PERSISTED;
  d.outcome = unknown ? Outcome::kUnknown : Outcome::kNotWritten;
  return d;
}

void Producer::OnDeliveryReport(rd_kafka_t*, const rd_kafka_message_t* msg, void*) {
  static_cast<DeliveryHandler*>(msg->_private)
      ->OnDelivery(Delivery::Of(msg->err, rd_kafka_message_status(msg), msg->offset));
}

int Producer::OnStats(rd_kafka_t*, char* json, size_t len, void* opaque) {
  auto* self = static_cast<Producer*>(opaque);
  std::lock_guard<std::mutex> lock(self->stats_mu_);
  self->stats_json_.assign(json, len);
  return 0;  // librdkafka frees `json`
}

std::string Producer::stats_json() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_json_;
}

void Producer::OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  if (code == RD_KAFKA_RESP_ERR__FATAL) {
    char fatal[512] = "";
    const rd_kafka_resp_err_t cause = rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
    spdlog::error("Kafka producer {} hit a fatal error and will be replaced: {} ({})",
                  rd_kafka_name(rk), fatal, rd_kafka_err2name(cause));
    static_cast<Producer*>(opaque)->fatal_ = true;
    return;
  }
  spdlog::warn("Kafka producer {}: {} ({})", rd_kafka_name(rk), reason, rd_kafka_err2name(code));
}

}  // namespace wal
