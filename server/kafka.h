// Thin RAII wrappers over librdkafka: one handle per client, one poll thread per producer (so
// delivery and error callbacks run on one known thread), librdkafka's log routed to spdlog.
#pragma once

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace wal {

struct KafkaHandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using KafkaHandle = std::unique_ptr<rd_kafka_t, KafkaHandleDeleter>;

// librdkafka properties common to every client of one server (bootstrap.servers, security and
// any pass-through settings); each client adds its own on top.
using KafkaProperties = std::map<std::string, std::string>;

// Creates a client of `type` with `properties`; `customize` may add callbacks to the conf.
absl::StatusOr<KafkaHandle> NewKafkaClient(
    rd_kafka_type_t type, const KafkaProperties& properties,
    const std::function<void(rd_kafka_conf_t*)>& customize = nullptr);

// Implemented by whoever produces a message; librdkafka's delivery report calls OnDelivery exactly
// once per message, on the producer's poll thread.
class DeliveryHandler {
 public:
  virtual ~DeliveryHandler() = default;
  virtual void OnDelivery(rd_kafka_resp_err_t err, int64_t offset) = 0;
};

// An idempotent producer (acks=all) with its own poll thread.
class Producer {
 public:
  static absl::StatusOr<std::unique_ptr<Producer>> Create(const KafkaProperties& properties,
                                                          std::string name);
  ~Producer();  // flushes for a bounded time, then purges: every handler still gets its report

  // Looks up `topics` now (and keeps their handles), so that producing to them later does not
  // wait for metadata. UNAVAILABLE if Kafka does not answer within `timeout_ms`.
  absl::Status Prepare(const std::vector<std::string>& topics, int timeout_ms);

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
  std::string stats_json_;
  // Topic handles by name: set up by Prepare, then read-only.
  std::map<std::string, rd_kafka_topic_t*> topics_;
};

struct MessageDeleter {
  void operator()(rd_kafka_message_t* m) const { rd_kafka_message_destroy(m); }
};
using Message = std::unique_ptr<rd_kafka_message_t, MessageDeleter>;

// A consumer that reads partitions at absolute offsets: no group membership, no commits,
// auto.offset.reset=error so that records missing from Kafka surface as an error.
class Consumer {
 public:
  static absl::StatusOr<std::unique_ptr<Consumer>> Create(const KafkaProperties& properties,
                                                          std::string name);
  ~Consumer();

  absl::Status Assign(const std::string& topic, int32_t partition, int64_t offset);
  // Moves the assigned partition's fetch position: what was fetched ahead is dropped and
  // fetching starts again at once. (Assigning again instead, many times a second, trips an
  // assertion in librdkafka 2.0.2's assignment code.)
  absl::Status Seek(const std::string& topic, int32_t partition, int64_t offset);
  absl::Status Unassign();
  // The next message or event (errors and partition EOF arrive as messages with err set);
  // nullptr when nothing came within `timeout_ms`.
  Message Poll(int timeout_ms);

  rd_kafka_t* handle() const { return rk_.get(); }

 private:
  explicit Consumer(KafkaHandle rk) : rk_(std::move(rk)) {}
  KafkaHandle rk_;
};

struct Watermarks {
  int64_t low = 0;   // first offset still in Kafka
  int64_t high = 0;  // next offset to be written
};
// Queries still running in librdkafka that their callers stopped waiting for (see kafka.cc):
// the client they use must not be destroyed while there are any.
int AbandonedWatermarkQueries();
// For shutdown: every watermark query running now fails at once (_TIMED_OUT).
void CancelWatermarkQueries();
absl::StatusOr<Watermarks> QueryWatermarks(rd_kafka_t* rk, const std::string& topic,
                                           int32_t partition, int timeout_ms);

// Deletes the records of a partition below `before` (Kafka's DeleteRecords); returns the new
// low watermark.
absl::StatusOr<int64_t> DeleteRecordsBefore(rd_kafka_t* rk, const std::string& topic,
                                            int32_t partition, int64_t before, int timeout_ms);

struct TopicSpec {
  std::string name;
  int partitions = 1;
  int replication_factor = -1;  // -1: the broker's default
  std::map<std::string, std::string> configs;
};

// Creates the topics that are missing and checks the ones that exist: partition count must match
// and each config in the spec must hold its value (a mismatch is an error; the caller decides).
absl::Status EnsureTopics(rd_kafka_t* rk, const std::vector<TopicSpec>& topics, int timeout_ms);

// Waits until every topic is known to the client's metadata with its partitions led.
absl::Status WaitForTopics(rd_kafka_t* rk, const std::vector<TopicSpec>& topics, int timeout_ms);

// librdkafka's in-process mock cluster, for the embedded default and for unit tests.
class MockCluster {
 public:
  static absl::StatusOr<std::unique_ptr<MockCluster>> Create(int brokers);
  ~MockCluster();
  std::string bootstrap_servers() const;
  absl::Status CreateTopic(const std::string& topic, int partitions);
  rd_kafka_mock_cluster_t* cluster() const { return cluster_; }

 private:
  MockCluster(KafkaHandle rk, rd_kafka_mock_cluster_t* cluster)
      : rk_(std::move(rk)), cluster_(cluster) {}
  KafkaHandle rk_;
  rd_kafka_mock_cluster_t* cluster_;
};

}  // namespace wal
