// An idempotent producer (acks=all) with one poll thread, so that delivery reports and error
// callbacks run on one known thread.
#pragma once

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/kafka/client.h"

namespace wal {

// What became of one produced record: the one place where librdkafka's delivery report is read.
// Each call family gives the outcomes its own meaning (an append: log/entry_writer.cc; a
// namespace change: meta/meta_store.cc).
struct Delivery {
  enum class Outcome {
    kWritten,     // Kafka stored it, at `offset`; -1 when Kafka had it from an earlier send
    kNotWritten,  // Kafka never stored it and never will: refused, or taken back unsent
    kUnknown,     // it was sent and then failed (or timed out): Kafka may have stored it
  };
  Outcome outcome = Outcome::kWritten;
  int64_t offset = -1;
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;  // why, when not kWritten

  bool written() const { return outcome == Outcome::kWritten; }
  // The outcome of a report with `err` (and librdkafka's persistence status `status`).
  static Delivery Of(rd_kafka_resp_err_t err, rd_kafka_msg_status_t status, int64_t offset);
};

// Implemented by whoever produces a message; librdkafka's delivery report calls OnDelivery exactly
// once per message, on the producer's poll thread.
class DeliveryHandler {
 public:
  virtual ~DeliveryHandler() = default;
  virtual void OnDelivery(const Delivery& delivery) = 0;
};

// An idempotent producer (acks=all) with its own poll thread.
class Producer {
 public:
  static absl::StatusOr<std::unique_ptr<Producer>> Create(const KafkaProperties& properties,
                                                          std::string name);
  ~Producer();  // flushes for a bounded time, then purges: every handler still gets its report

  // Looks up `topics` now (and keeps their handles), so that producing to them later does not
  // wait for metadata. UNAVAILABLE if Kafka does not answer by `deadline`.
  absl::Status Prepare(const std::vector<std::string>& topics, Clock::time_point deadline);

  // Enqueues one record; `value` is not copied and must stay valid until `handler` is called.
  // Never blocks. On error the handler will not be called.
  absl::Status Produce(const std::string& topic, int32_t partition, std::string_view key,
                       std::string_view value, DeliveryHandler* handler);

  rd_kafka_t* handle() const { return rk_.get(); }
  const std::string& name() const { return name_; }
  // True after a fatal error (e.g. of the idempotent producer's sequence state): the handle
  // produces nothing any more and must be replaced.
  bool fatal() const { return fatal_.load(); }
  // Fails every record still queued or in flight (their handlers hear _PURGE_*).
  void Purge() { rd_kafka_purge(rk_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT); }
  // Fails only the records never sent (their handlers hear _PURGE_QUEUE: not written).
  void PurgeUnsent() { rd_kafka_purge(rk_.get(), RD_KAFKA_PURGE_F_QUEUE); }
  // Records and requests waiting in librdkafka's queues.
  int queue_length() const { return rd_kafka_outq_len(rk_.get()); }
  // The latest librdkafka statistics (JSON), if statistics.interval.ms is set; empty before.
  std::string stats_json() const;

 private:
  explicit Producer(std::string name) : name_(std::move(name)) {}
  static void OnDeliveryReport(rd_kafka_t* rk, const rd_kafka_message_t* msg, void* opaque);
  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque);
  static int OnStats(rd_kafka_t* rk, char* json, size_t len, void* opaque);

  KafkaHandle rk_;
  std::string name_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> fatal_{false};
  std::thread poll_thread_;
  mutable std::mutex stats_mu_;
  std::string stats_json_ ABSL_GUARDED_BY(stats_mu_);
  // Topic handles by name: set up by Prepare, then read-only.
  std::map<std::string, rd_kafka_topic_t*> topics_;
};

}  // namespace wal
