#include "server/kafka/slot_ends.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/kafka/admin.h"

namespace wal {

SlotEnds::SlotEnds(rd_kafka_t* kafka)
    : query_([kafka](const Slot& slot, Clock::time_point deadline) -> absl::StatusOr<int64_t> {
        auto marks = QueryWatermarks(kafka, slot.topic, slot.partition,
                                     std::max(1, MillisLeft(deadline, 1 << 30)));
        if (!marks.ok()) return marks.status();
        return marks->high;
      }) {}

absl::StatusOr<int64_t> SlotEnds::Get(const Slot& slot, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  std::unique_ptr<Flight>& entry = flights_[slot];
  if (!entry) entry = std::make_unique<Flight>();
  Flight& flight = *entry;  // never erased: one per slot
  // The first query to start from now on answers this call.
  const uint64_t wanted = flight.started + 1;
  while (flight.finished < wanted) {
    if (!flight.running) {
      flight.running = true;
      const uint64_t number = ++flight.started;
      ++queries_;
      lock.unlock();
      absl::StatusOr<int64_t> end = query_(slot, deadline);
      lock.lock();
      flight.running = false;
      flight.finished = number;
      flight.result = std::move(end);
      flight.done.notify_all();
      continue;
    }
    if (flight.done.wait_until(lock, deadline) == std::cv_status::timeout &&
        flight.finished < wanted) {
      return absl::UnavailableError(absl::StrCat("querying the end of ", slot.topic, "[",
                                                 slot.partition, "] took past the deadline"));
    }
  }
  return flight.result;
}

uint64_t SlotEnds::queries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queries_;
}

}  // namespace wal
