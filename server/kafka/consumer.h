// A consumer of partitions at absolute offsets, as the slot scans and the meta store use it.
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/kafka/client.h"

namespace wal {

struct MessageDeleter {
  // librdkafka's, for messages it made; a fake consumer in tests passes its own.
  void (*destroy)(rd_kafka_message_t*) = rd_kafka_message_destroy;
  void operator()(rd_kafka_message_t* m) const { destroy(m); }
};
using Message = std::unique_ptr<rd_kafka_message_t, MessageDeleter>;

// A consumer that reads partitions at absolute offsets: no group membership, no commits,
// auto.offset.reset=error so that records missing from Kafka surface as an error. The methods a
// slot scan calls are virtual, so that unit tests can drive a scan with a fake. One thread at a
// time: Poll, PollBatch, Assign, Seek and Unassign share the messages taken ahead unlocked.
class Consumer {
 public:
  static absl::StatusOr<std::unique_ptr<Consumer>> Create(const KafkaProperties& properties,
                                                          std::string name);
  // fetch.wait.max.ms unless the properties set it: how long a fetch at the partition's end
  // waits at the broker for new records. Until it returns, the consumer fetches nothing else,
  // also after it is assigned elsewhere.
  static constexpr int kDefaultFetchWaitMs = 50;
  virtual ~Consumer();

  virtual absl::Status Assign(const std::string& topic, int32_t partition, int64_t offset);
  // Moves the assigned partition's fetch position: what was fetched ahead is dropped and
  // fetching starts again at once. Scans rewind with it rather than by assigning again, which
  // is the heavier operation (and, many times a second, tripped an assertion in librdkafka
  // 2.0.2's assignment code under ThreadSanitizer; not tried again on 2.12.1). After a failed
  // seek the position is unknown (what was taken ahead is gone): assign again.
  virtual absl::Status Seek(const std::string& topic, int32_t partition, int64_t offset);
  virtual absl::Status Unassign();
  // The next message or event (errors and partition EOF arrive as messages with err set);
  // nullptr when nothing came within `timeout_ms`. Takes what librdkafka has queued ahead, up
  // to kAheadRecords records or about kAheadBytes (an assign, seek or unassign drops it): one
  // call into librdkafka per record read its clock three or four times and took its queue's
  // lock (docs/benchmarks/2026-12-04-replay-profiled.md). librdkafka counts what was taken ahead as
  // consumed: its queue limit (queued.max.messages.kbytes) does not include it.
  virtual Message Poll(int timeout_ms);
  // Up to `max` of what Poll returns: the first as Poll waits for it, then whatever is already
  // queued behind it. Empty when nothing came within `timeout_ms`.
  std::vector<Message> PollBatch(int timeout_ms, size_t max);

  rd_kafka_t* handle() const { return rk_.get(); }

 protected:
  Consumer() = default;  // for fakes: no librdkafka handle

 private:
  // Taken ahead at most: records, their bytes (past which no more calls are made), and records
  // per call (so at most kAheadBytes plus this many records of any size).
  static constexpr size_t kAheadRecords = 64;
  static constexpr size_t kAheadBytes = 256 << 10;
  static constexpr size_t kAheadPerCall = 8;

  explicit Consumer(KafkaHandle rk) : rk_(std::move(rk)) {}
  // Polls librdkafka for one message within `timeout_ms`, then takes what is queued behind it
  // into ahead_.
  void FetchAhead(int timeout_ms);

  KafkaHandle rk_;
  std::deque<Message> ahead_;  // taken from librdkafka's queue, not yet returned by Poll
};

}  // namespace wal
