#include "server/kafka/consumer.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/common/deadline.h"
#include "server/kafka/errors.h"

namespace wal {

absl::StatusOr<std::unique_ptr<Consumer>> Consumer::Create(const KafkaProperties& properties,
                                                           std::string name) {
  KafkaProperties props = properties;
  props["client.id"] = name;
  // librdkafka (2.12.1 too) wants a group.id for assign(); the group is never joined or
  // committed to.
  props["group.id"] = "walserver-reader";
  props["enable.auto.commit"] = "false";
  props["enable.auto.offset.store"] = "false";
  props["auto.offset.reset"] = "error";
  props["enable.partition.eof"] = "true";
  if (!props.count("fetch.wait.max.ms")) {
    props["fetch.wait.max.ms"] = std::to_string(kDefaultFetchWaitMs);
  }
  // Kafka's CRC of each fetched batch: entries carry their own checksum, but a damaged record
  // header would otherwise read as a record of someone else's and be skipped without a word.
  if (!props.count("check.crcs")) props["check.crcs"] = "true";
  if (!props.count("queued.max.messages.kbytes")) props["queued.max.messages.kbytes"] = "16384";
  // Once the queue reaches either limit, librdkafka stops fetching for this long (1 s by
  // default), however soon the reader drains it: a scan reading faster than one queue a second
  // would pause every 16 MiB.
  if (!props.count("fetch.queue.backoff.ms")) props["fetch.queue.backoff.ms"] = "10";
  auto rk = NewKafkaClient(RD_KAFKA_CONSUMER, props);
  if (!rk.ok()) return rk.status();
  rd_kafka_poll_set_consumer(rk->get());
  return std::unique_ptr<Consumer>(new Consumer(std::move(*rk)));
}

Consumer::~Consumer() {
  ahead_.clear();  // messages go back before the handle closes
  if (rk_) rd_kafka_consumer_close(rk_.get());
}

absl::Status Consumer::Assign(const std::string& topic, int32_t partition, int64_t offset) {
  ahead_.clear();
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), partition)->offset = offset;
  rd_kafka_resp_err_t err = rd_kafka_assign(rk_.get(), list);
  rd_kafka_topic_partition_list_destroy(list);
  return KafkaErrorToStatus(err, "assigning a partition");
}

absl::Status Consumer::Seek(const std::string& topic, int32_t partition, int64_t offset) {
  ahead_.clear();
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), partition)->offset = offset;
  // A seek only updates the local fetcher and is answered at once; the bound is for a client
  // whose threads are stuck. (librdkafka 2.0.2 waited a thousandth of a seek's timeout, so
  // seeks waited without one until 2.12.1.)
  rd_kafka_error_t* error =
      rd_kafka_seek_partitions(rk_.get(), list, static_cast<int>(kKafkaRequestTimeout.count()));
  rd_kafka_resp_err_t err = list->elems[0].err;
  if (error != nullptr) {
    err = rd_kafka_error_code(error);
    rd_kafka_error_destroy(error);
  }
  rd_kafka_topic_partition_list_destroy(list);
  return KafkaErrorToStatus(err, "seeking in a partition");
}

absl::Status Consumer::Unassign() {
  ahead_.clear();
  return KafkaErrorToStatus(rd_kafka_assign(rk_.get(), nullptr), "unassigning");
}

Message Consumer::Poll(int timeout_ms) {
  if (ahead_.empty()) FetchAhead(timeout_ms);
  if (ahead_.empty()) return nullptr;
  Message next = std::move(ahead_.front());
  ahead_.pop_front();
  return next;
}

void Consumer::FetchAhead(int timeout_ms) {
  Message first(rd_kafka_consumer_poll(rk_.get(), timeout_ms));
  if (!first) return;
  size_t bytes = first->len;
  ahead_.push_back(std::move(first));
  // Then what is queued already, a few at a time until the bounds. (With a timeout, librdkafka
  // would wait for a full batch.)
  rd_kafka_queue_t* queue = rd_kafka_queue_get_consumer(rk_.get());
  if (queue == nullptr) return;
  while (ahead_.size() < kAheadRecords && bytes < kAheadBytes) {
    rd_kafka_message_t* raw[kAheadPerCall];
    const ssize_t n = rd_kafka_consume_batch_queue(
        queue, 0, raw, std::min(kAheadPerCall, kAheadRecords - ahead_.size()));
    for (ssize_t i = 0; i < n; ++i) {
      bytes += raw[i]->len;
      ahead_.emplace_back(raw[i]);
    }
    if (n < static_cast<ssize_t>(kAheadPerCall)) break;  // the queue is empty (or an error)
  }
  rd_kafka_queue_destroy(queue);
}

std::vector<Message> Consumer::PollBatch(int timeout_ms, size_t max) {
  std::vector<Message> out;
  Message m = Poll(timeout_ms);
  while (m) {
    out.push_back(std::move(m));
    if (out.size() >= max) break;
    m = Poll(0);
  }
  return out;
}

}  // namespace wal
