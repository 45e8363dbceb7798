// The direct baselines' pieces: librdkafka producing and consuming with no walserver in between.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "server/kafka/producer.h"

namespace walbench {

// The direct runs' producer: walserver's own Producer class (idempotent, acks=all), on --brokers
// with linger.ms=0 and Nagle off.
class DirectProducer {
 public:
  DirectProducer();
  wal::Producer& get() { return *producer_; }

 private:
  std::unique_ptr<wal::Producer> producer_;
};

// Waits for a set of delivery reports, like one Append call waits for its entries.
class BatchWait : public wal::DeliveryHandler {
 public:
  void Expect(int n);
  void OnDelivery(const wal::Delivery& delivery) override;
  int Wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
  int errors_ = 0;
};

// Calls `fn` on its one delivery report, then deletes itself: made with new for each record of
// an open loop.
struct CallOnDelivery : wal::DeliveryHandler {
  std::function<void()> fn;
  void OnDelivery(const wal::Delivery&) override {
    fn();
    delete this;
  }
};

// Raw scan of [start, end) of a slot with a consumer, adding the bytes of every record to
// *bytes; returns the seconds it took.
double RawScan(const std::string& topic, int partition, int64_t start, int64_t end,
               uint64_t* bytes);

}  // namespace walbench
