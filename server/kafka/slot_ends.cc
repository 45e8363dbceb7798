#include "server/kafka/slot_ends.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/kafka/admin.h"

namespace wal {

SlotEnds::SlotEnds(rd_kafka_t* kafka)
    : query_([kafka](const Slot& slot, Clock::time_point deadline) -> absl::StatusOr<int64_t> {
        auto marks = QueryWatermarks(kafka, slot, deadline);
        if (!marks.ok()) return marks.status();
        return marks->high;
      }),
      cancellations_(WatermarkQueryCancellations) {}

absl::StatusOr<int64_t> SlotEnds::Get(const Slot& slot, Clock::time_point deadline) {
  const uint64_t cancelled_before = cancellations_();
  const auto late = [&] {
    return absl::UnavailableError(
        absl::StrCat("querying the end of ", slot.topic, "[", slot.partition, "]: no time left"));
  };
  std::unique_lock<std::mutex> lock(mu_);
  std::unique_ptr<Flight>& entry = flights_[slot];
  if (!entry) entry = std::make_unique<Flight>();
  Flight& flight = *entry;  // never erased: one per slot
  // The first query to start from now on answers this call.
  uint64_t wanted = flight.started + 1;
  while (true) {
    if (flight.finished >= wanted) {
      // A query that failed for lack of time fails only the calls that had no more time than it;
      // the others ask again.
      if (flight.result.ok() || flight.result_deadline >= deadline || Clock::now() >= deadline ||
          cancellations_() != cancelled_before) {
        return flight.result;
      }
      wanted = flight.started + 1;
      continue;
    }
    // Shutdown cancelled the queries: a new one would not be cancelled with them.
    if (cancellations_() != cancelled_before) {
      return absl::UnavailableError("walserver is shutting down");
    }
    if (!flight.running) {
      if (Clock::now() >= deadline) return late();
      flight.running = true;
      const uint64_t number = ++flight.started;
      ++queries_;
      lock.unlock();
      absl::StatusOr<int64_t> end = query_(slot, deadline);
      lock.lock();
      flight.running = false;
      flight.finished = number;
      flight.result = std::move(end);
      flight.result_deadline = deadline;
      flight.done.notify_all();
      continue;
    }
    ++waiting_;
    // Waking every 100 ms to see whether shutdown cancelled the queries.
    flight.done.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    --waiting_;
    if (flight.finished < wanted && Clock::now() >= deadline) {
      // Whoever starts the next query is awake: this call may have been woken to start it.
      flight.done.notify_all();
      return late();
    }
  }
}

uint64_t SlotEnds::queries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queries_;
}

int SlotEnds::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

}  // namespace wal
