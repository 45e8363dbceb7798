// librdkafka straight to the broker: the direct producer, its delivery waits, the raw scan.
#include "bench/walbench/direct_kafka.h"

#include <algorithm>
#include <utility>

#include "absl/flags/flag.h"
#include "bench/walbench/flags.h"
#include "bench/walbench/measure.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"

namespace walbench {

DirectProducer::DirectProducer() {
  wal::KafkaProperties props{{"bootstrap.servers", absl::GetFlag(FLAGS_brokers)},
                             {"linger.ms", "0"},
                             {"socket.nagle.disable", "true"},
                             {"message.max.bytes", "1064576"}};
  producer_ = std::move(*wal::Producer::Create(props, "walbench-direct"));
}

void BatchWait::Expect(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_ = n;
  errors_ = 0;  // each batch counts its own
}

void BatchWait::OnDelivery(const wal::Delivery& delivery) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!delivery.written()) ++errors_;
  if (--pending_ == 0) cv_.notify_one();
}

int BatchWait::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return pending_ == 0; });
  return errors_;
}

double RawScan(const std::string& topic, int partition, int64_t start, int64_t end,
               uint64_t* bytes) {
  wal::KafkaProperties props{{"bootstrap.servers", absl::GetFlag(FLAGS_brokers)},
                             {"socket.nagle.disable", "true"},
                             {"fetch.message.max.bytes", "1064576"}};
  auto consumer = std::move(*wal::Consumer::Create(props, "walbench-scan"));
  const auto t0 = Clock::now();
  Must(consumer->Assign(topic, partition, start), "assigning the raw scan");
  *bytes = 0;
  for (int64_t pos = start; pos < end;) {
    wal::Message m = consumer->Poll(100);
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      pos = std::max(pos, m->offset);
      continue;
    }
    if (m->err) continue;
    *bytes += m->len;
    pos = m->offset + 1;
  }
  return duration<double>(Clock::now() - t0).count();
}

}  // namespace walbench
