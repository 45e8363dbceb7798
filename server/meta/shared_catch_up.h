// Catch-ups of the namespace table shared by every caller waiting at the same time, on threads
// of their own. An append naming a namespace this server has not seen must catch up with the
// metadata topic before it is refused NOT_FOUND (another server may have just created it). Done
// on the admin threads, one per append, a client appending to a deleted namespace during a Kafka
// slowdown held all of them (and made one end-of-topic query per append); here any number of
// such appends cost two threads and one catch-up at a time, and each caller is answered by its
// own deadline.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
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

  // Calls `then` once, on one of this object's threads (after Stop(), on the caller's, at once):
  // with the outcome of a catch-up that
  // began after this call (OK: the table holds every change made before it), or
  // DEADLINE_EXCEEDED at `deadline` if none finished by then. A round is bounded by the latest
  // deadline of its callers. Never blocks.
  void After(Clock::time_point deadline, Then then);

  // Shutdown: answers every caller UNAVAILABLE now, also those of the round in progress (it
  // ends on its own, bounded by its deadline), and every later caller at once; starts no more
  // rounds. A round begun after the shutdown cancelled Kafka queries would not notice it and
  // hold its callers to their deadlines.
  void Stop();

  // Catch-ups begun so far (for tests).
  uint64_t rounds() const;

 private:
  struct Waiter {
    Clock::time_point deadline;
    Then then;
    bool answered = false;  // guarded by mu_
  };
  // Calls the waiter's `then` unless it was answered already.
  void Answer(Waiter& w, absl::Status status);
  // Runs one round at a time for everyone who arrived before it.
  void RoundLoop();
  // Answers callers whose deadline passed, waiting or in a round.
  void TimerLoop();

  const CatchUpFn catch_up_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Waiter>> waiting_ ABSL_GUARDED_BY(mu_);   // for the next round
  std::vector<std::shared_ptr<Waiter>> in_round_ ABSL_GUARDED_BY(mu_);  // the round running
  uint64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread round_thread_;
  std::thread timer_thread_;
};

}  // namespace wal
