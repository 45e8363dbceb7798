#include "server/kafka/slot_ends.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace wal {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A slot end that the test moves, and queries that each see the end as it was when they started
// and answer only when the test releases them, in order (or fail after 10 s, so that a broken
// SlotEnds fails the test instead of hanging it).
class FakeKafka {
 public:
  absl::StatusOr<int64_t> Query(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    const int number = ++started_;
    const int64_t seen = end_;
    cv_.notify_all();
    if (!cv_.wait_until(lock, std::min(deadline, Clock::now() + seconds(10)),
                        [&] { return released_ >= number; })) {
      return absl::UnavailableError("timed out");
    }
    return seen;
  }
  void SetEnd(int64_t end) {
    std::lock_guard<std::mutex> lock(mu_);
    end_ = end;
  }
  // False if fewer than `n` queries started within 5 s.
  bool WaitStarted(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, seconds(5), [&] { return started_ >= n; });
  }
  void Release(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = n;
    cv_.notify_all();
  }
  int started() {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t end_ = 0;
  int started_ = 0;
  int released_ = 0;
};

const Slot kSlot{"wal_0", 0};

Clock::time_point In(milliseconds ms) { return Clock::now() + ms; }

// True once `n` calls wait behind a running query (within 5 s).
bool WaitForWaiting(const SlotEnds& ends, int n) {
  const auto until = Clock::now() + seconds(5);
  while (ends.waiting() < n && Clock::now() < until) std::this_thread::sleep_for(milliseconds(1));
  return ends.waiting() >= n;
}

SlotEnds::Cancellations Never() {
  return [] { return uint64_t{0}; };
}

TEST(SlotEnds, CallsArrivingDuringAQueryShareTheNextOneAndNeverGetAnOlderEnd) {
  FakeKafka kafka;
  SlotEnds ends([&](const Slot&, Clock::time_point d) { return kafka.Query(d); }, Never());
  kafka.SetEnd(10);
  auto first = std::async(std::launch::async, [&] { return ends.Get(kSlot, In(seconds(20))); });
  ASSERT_TRUE(kafka.WaitStarted(1));
  // The end moves on; calls made from now on must see at least 20.
  kafka.SetEnd(20);
  std::vector<std::future<absl::StatusOr<int64_t>>> later;
  for (int i = 0; i < 3; ++i) {
    later.push_back(
        std::async(std::launch::async, [&] { return ends.Get(kSlot, In(seconds(20))); }));
  }
  EXPECT_TRUE(WaitForWaiting(ends, 3));
  EXPECT_EQ(kafka.started(), 1);
  kafka.Release(1);
  auto a = first.get();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, 10);
  EXPECT_TRUE(kafka.WaitStarted(2)) << "no query started for the calls made after the end moved";
  kafka.Release(2);
  for (auto& f : later) {
    auto b = f.get();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(*b, 20) << "a call got the end of a query that started before it";
  }
  EXPECT_EQ(ends.queries(), 2u) << "the three later calls did not share one query";
}

TEST(SlotEnds, AWaitingCallEndsAtItsOwnDeadline) {
  FakeKafka kafka;
  SlotEnds ends([&](const Slot&, Clock::time_point d) { return kafka.Query(d); }, Never());
  auto stuck = std::async(std::launch::async, [&] { return ends.Get(kSlot, In(seconds(20))); });
  ASSERT_TRUE(kafka.WaitStarted(1));
  const auto t0 = Clock::now();
  auto late = ends.Get(kSlot, In(milliseconds(200)));
  EXPECT_TRUE(absl::IsUnavailable(late.status())) << late.status();
  EXPECT_LT(Clock::now() - t0, seconds(2));
  kafka.Release(1);
  EXPECT_TRUE(stuck.get().ok());
}

// A query that ran out of its starter's short deadline does not fail a call with time left.
TEST(SlotEnds, AShortDeadlinesTimeoutDoesNotFailALongerCall) {
  std::atomic<int> calls{0};
  SlotEnds ends(
      [&](const Slot&, Clock::time_point deadline) -> absl::StatusOr<int64_t> {
        if (++calls == 1) {
          std::this_thread::sleep_until(deadline);
          return absl::UnavailableError("timed out");
        }
        return 42;
      },
      Never());
  auto short_call =
      std::async(std::launch::async, [&] { return ends.Get(kSlot, In(milliseconds(300))); });
  while (calls == 0) std::this_thread::sleep_for(milliseconds(1));
  auto long_call = ends.Get(kSlot, In(seconds(20)));
  ASSERT_TRUE(long_call.ok()) << long_call.status();
  EXPECT_EQ(*long_call, 42);
  EXPECT_TRUE(absl::IsUnavailable(short_call.get().status()));
}

// Shutdown cancels the running queries: the calls waiting on one fail with it instead of
// starting another that nothing would cancel.
TEST(SlotEnds, CallsWaitingWhenShutdownCancelsStartNoNewQuery) {
  FakeKafka kafka;
  std::atomic<uint64_t> cancellations{0};
  SlotEnds ends([&](const Slot&, Clock::time_point d) { return kafka.Query(d); },
                [&] { return cancellations.load(); });
  auto running = std::async(std::launch::async, [&] { return ends.Get(kSlot, In(seconds(20))); });
  ASSERT_TRUE(kafka.WaitStarted(1));
  auto waiting = std::async(std::launch::async, [&] { return ends.Get(kSlot, In(seconds(20))); });
  ASSERT_TRUE(WaitForWaiting(ends, 1));
  ++cancellations;
  const auto t0 = Clock::now();
  auto waited = waiting.get();
  EXPECT_TRUE(absl::IsUnavailable(waited.status())) << waited.status();
  EXPECT_LT(Clock::now() - t0, seconds(2));
  kafka.Release(1);
  EXPECT_TRUE(running.get().ok());
  EXPECT_EQ(kafka.started(), 1);
}

TEST(SlotEnds, AFailedQueryFailsTheCallsItAnswers) {
  SlotEnds ends(
      [](const Slot&, Clock::time_point) -> absl::StatusOr<int64_t> {
        return absl::UnavailableError("broker down");
      },
      Never());
  auto end = ends.Get(kSlot, In(milliseconds(1000)));
  EXPECT_TRUE(absl::IsUnavailable(end.status())) << end.status();
  EXPECT_EQ(ends.queries(), 1u);
}

}  // namespace
}  // namespace wal
