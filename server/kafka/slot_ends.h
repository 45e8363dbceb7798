// End offsets of slots, queried from Kafka with concurrent callers sharing one query per slot.
// A caller gets the answer of a query that started after it asked, so it never sees an end from
// before its call (a namespace created after a deletion must start past the old records).
#pragma once

#include <librdkafka/rdkafka.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/common/slot.h"

namespace wal {

class SlotEnds {
 public:
  // Asks Kafka for a slot's end, by the deadline.
  using Query = std::function<absl::StatusOr<int64_t>(const Slot&, Clock::time_point)>;
  // How many times shutdown cancelled the queries; a call fails once it changes.
  using Cancellations = std::function<uint64_t()>;
  // Queries the high watermarks on `kafka`.
  explicit SlotEnds(rd_kafka_t* kafka);
  // With another query (tests).
  SlotEnds(Query query, Cancellations cancellations)
      : query_(std::move(query)), cancellations_(std::move(cancellations)) {}

  // The slot's high watermark. With 256 CreateNamespace calls at once, each asked Kafka on its
  // own: a ListOffsets round trip per call.
  absl::StatusOr<int64_t> Get(const Slot& slot, Clock::time_point deadline);
  // Queries sent to Kafka so far.
  uint64_t queries() const;
  // Calls waiting for another call's query now (tests).
  int waiting() const;

 private:
  struct Flight {
    std::condition_variable done;
    bool running = false;
    uint64_t started = 0;   // queries started so far
    uint64_t finished = 0;  // the number of the last query that finished
    absl::StatusOr<int64_t> result;
    Clock::time_point result_deadline;  // the deadline the last finished query had
  };

  const Query query_;
  const Cancellations cancellations_;
  mutable std::mutex mu_;
  uint64_t queries_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<Slot, std::unique_ptr<Flight>> flights_ ABSL_GUARDED_BY(mu_);
};

}  // namespace wal
