// Catch-ups of the namespace table shared by every caller waiting at the same time, on a thread
// of their own. An append naming a namespace this server has not seen must catch up with the
// metadata topic before it is refused NOT_FOUND (another server may have just created it). Done
// on the admin threads, one per append, a client appending to a deleted namespace during a Kafka
// slowdown held all of them (and made one end-of-topic query per append); here any number of
// such appends cost one thread and at most two catch-ups at a time.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "server/common/deadline.h"

namespace wal {

class SharedCatchUp {
 public:
  // `catch_up` reads the table up to the metadata topic's end as of its call, within a deadline
  // (MetaStore::CatchUp).
  using CatchUpFn = std::function<absl::Status(Clock::time_point deadline)>;
  using Then = std::function<void(absl::Status)>;

  explicit SharedCatchUp(CatchUpFn catch_up);
  // Answers the callers still waiting UNAVAILABLE, after the round in progress (bounded by its
  // deadline).
  ~SharedCatchUp();
  SharedCatchUp(const SharedCatchUp&) = delete;
  SharedCatchUp& operator=(const SharedCatchUp&) = delete;

  // Calls `then` once, on this object's thread: OK after a catch-up that began after this call
  // has finished (the table then holds every change made before it), or the error of the last
  // one tried once `deadline` has passed (DEADLINE_EXCEEDED if none could be tried). Never
  // blocks.
  void After(Clock::time_point deadline, Then then);

  // Catch-ups begun so far (for tests).
  uint64_t rounds() const;

 private:
  struct Waiter {
    Clock::time_point deadline;
    Then then;
  };
  void Loop();

  const CatchUpFn catch_up_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Waiter> waiting_ ABSL_GUARDED_BY(mu_);  // for the next round
  uint64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace wal
