#include "server/meta/shared_catch_up.h"

#include <algorithm>
#include <utility>

namespace wal {

namespace {
absl::Status ShuttingDown() { return absl::UnavailableError("walserver is shutting down"); }

absl::Status Expired() {
  return absl::DeadlineExceededError(
      "the deadline passed before the namespace table could be read up to date");
}
}  // namespace

SharedCatchUp::SharedCatchUp(CatchUpFn catch_up)
    : catch_up_(std::move(catch_up)),
      round_thread_([this] { RoundLoop(); }),
      timer_thread_([this] { TimerLoop(); }) {}

SharedCatchUp::~SharedCatchUp() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  round_thread_.join();
  timer_thread_.join();
  std::vector<std::shared_ptr<Waiter>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(waiting_);
  }
  for (auto& w : left) Answer(*w, ShuttingDown());
}

void SharedCatchUp::Stop() {
  std::vector<std::shared_ptr<Waiter>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    left.swap(waiting_);
    left.insert(left.end(), in_round_.begin(), in_round_.end());
  }
  cv_.notify_all();
  for (auto& w : left) Answer(*w, ShuttingDown());
}

void SharedCatchUp::After(Clock::time_point deadline, Then then) {
  auto waiter = std::make_shared<Waiter>();
  waiter->deadline = deadline;
  waiter->then = std::move(then);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      waiting_.push_back(std::move(waiter));
      cv_.notify_all();
      return;
    }
  }
  Answer(*waiter, ShuttingDown());
}

uint64_t SharedCatchUp::rounds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rounds_;
}

void SharedCatchUp::Answer(Waiter& w, absl::Status status) {
  Then then;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (w.answered) return;
    w.answered = true;
    then = std::move(w.then);
  }
  then(std::move(status));
}

void SharedCatchUp::RoundLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !waiting_.empty(); });
    if (stop_) return;
    // Everyone waiting now arrived before this round begins, so its catch-up serves them all.
    // The timer answers those whose deadline passed, before or during the round.
    in_round_.clear();
    std::vector<std::shared_ptr<Waiter>> expired;
    const Clock::time_point now = Clock::now();
    for (auto& w : waiting_) {
      if (w->answered) continue;
      (w->deadline <= now ? expired : in_round_).push_back(std::move(w));
    }
    waiting_.clear();
    if (!expired.empty()) {
      lock.unlock();
      for (auto& w : expired) Answer(*w, Expired());
      lock.lock();
      if (stop_) return;  // Stop() answered the others meanwhile
    }
    if (in_round_.empty()) continue;
    // The latest deadline bounds the round, so that a caller with little time left never cuts
    // short the catch-up of one with more.
    Clock::time_point round_deadline = Clock::time_point::min();
    for (const auto& w : in_round_) round_deadline = std::max(round_deadline, w->deadline);
    ++rounds_;
    lock.unlock();
    const absl::Status status = catch_up_(round_deadline);
    lock.lock();
    std::vector<std::shared_ptr<Waiter>> done;
    done.swap(in_round_);
    cv_.notify_all();  // the timer no longer watches them
    lock.unlock();
    for (auto& w : done) Answer(*w, status);
    lock.lock();
  }
}

void SharedCatchUp::TimerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    Clock::time_point next = Clock::time_point::max();
    std::vector<std::shared_ptr<Waiter>> expired;
    const Clock::time_point now = Clock::now();
    for (const auto* list : {&waiting_, &in_round_}) {
      for (const auto& w : *list) {
        if (w->answered) continue;
        if (w->deadline <= now) {
          expired.push_back(w);
        } else {
          next = std::min(next, w->deadline);
        }
      }
    }
    if (expired.empty()) {
      if (next == Clock::time_point::max()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, next);
      }
      continue;
    }
    lock.unlock();
    for (auto& w : expired) Answer(*w, Expired());
    lock.lock();
  }
}

}  // namespace wal
