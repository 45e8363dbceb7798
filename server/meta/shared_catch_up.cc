#include "server/meta/shared_catch_up.h"

#include <algorithm>
#include <utility>

namespace wal {

namespace {
// After a failed round, the callers with time left try again after this pause: a Kafka that
// refuses at once must not be asked in a tight loop.
constexpr std::chrono::milliseconds kRetryPause{100};
}  // namespace

SharedCatchUp::SharedCatchUp(CatchUpFn catch_up)
    : catch_up_(std::move(catch_up)), thread_([this] { Loop(); }) {}

SharedCatchUp::~SharedCatchUp() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SharedCatchUp::After(Clock::time_point deadline, Then then) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      waiting_.push_back(Waiter{deadline, std::move(then)});
      cv_.notify_one();
      return;
    }
  }
  then(absl::UnavailableError("walserver is shutting down"));
}

uint64_t SharedCatchUp::rounds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rounds_;
}

void SharedCatchUp::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !waiting_.empty(); });
    if (stop_) break;
    // Everyone waiting now arrived before this round begins, so its catch-up serves them all.
    std::vector<Waiter> round = std::move(waiting_);
    waiting_.clear();
    lock.unlock();

    // Callers whose deadline has passed are answered without a round: they are gone.
    const Clock::time_point now = Clock::now();
    std::vector<Waiter> live;
    for (Waiter& w : round) {
      if (w.deadline <= now) {
        w.then(absl::DeadlineExceededError(
            "the deadline passed before the namespace table could be read up to date"));
      } else {
        live.push_back(std::move(w));
      }
    }
    if (live.empty()) {
      lock.lock();
      continue;
    }
    // The earliest deadline bounds the round, so that each caller is answered by its own.
    Clock::time_point round_deadline = Clock::time_point::max();
    for (const Waiter& w : live) round_deadline = std::min(round_deadline, w.deadline);
    {
      std::lock_guard<std::mutex> count(mu_);
      ++rounds_;
    }
    const absl::Status status = catch_up_(round_deadline);

    // A failed round is final for the callers it was bounded by; the others try again.
    std::vector<Waiter> again;
    const Clock::time_point after = Clock::now() + kRetryPause;
    for (Waiter& w : live) {
      if (status.ok() || w.deadline <= after) {
        w.then(status);
      } else {
        again.push_back(std::move(w));
      }
    }
    lock.lock();
    if (!again.empty()) {
      cv_.wait_for(lock, kRetryPause, [this] { return stop_; });
      waiting_.insert(waiting_.end(), std::make_move_iterator(again.begin()),
                      std::make_move_iterator(again.end()));
    }
  }
  std::vector<Waiter> left = std::move(waiting_);
  waiting_.clear();
  lock.unlock();
  for (Waiter& w : left) w.then(absl::UnavailableError("walserver is shutting down"));
}

}  // namespace wal
