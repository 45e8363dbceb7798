#include "server/kafka/slot_ends.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace wal {
namespace {

using std::chrono::milliseconds;

// A slot end that the test moves, and queries that each see the end as it was when they started
// and answer only when the test releases them, in order.
class FakeKafka {
 public:
  absl::StatusOr<int64_t> Query() {
    std::unique_lock<std::mutex> lock(mu_);
    const int number = ++started_;
    const int64_t seen = end_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_ >= number; });
    return seen;
  }
  void SetEnd(int64_t end) {
    std::lock_guard<std::mutex> lock(mu_);
    end_ = end;
  }
  // False if fewer than `n` queries started within 5 s.
  bool WaitStarted(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return started_ >= n; });
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

TEST(SlotEnds, CallsArrivingDuringAQueryShareTheNextOneAndNeverGetAnOlderEnd) {
  FakeKafka kafka;
  SlotEnds ends([&](const Slot&, Clock::time_point) { return kafka.Query(); });
  kafka.SetEnd(10);
  auto first =
      std::async(std::launch::async, [&] { return ends.Get(kSlot, In(milliseconds(10000))); });
  ASSERT_TRUE(kafka.WaitStarted(1));
  // The end moves on; calls made from now on must see at least 20.
  kafka.SetEnd(20);
  std::vector<std::future<absl::StatusOr<int64_t>>> later;
  for (int i = 0; i < 3; ++i) {
    later.push_back(
        std::async(std::launch::async, [&] { return ends.Get(kSlot, In(milliseconds(10000))); }));
  }
  std::this_thread::sleep_for(milliseconds(200));  // they wait behind the first query
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
  SlotEnds ends([&](const Slot&, Clock::time_point) { return kafka.Query(); });
  auto stuck =
      std::async(std::launch::async, [&] { return ends.Get(kSlot, In(milliseconds(10000))); });
  ASSERT_TRUE(kafka.WaitStarted(1));
  const auto t0 = Clock::now();
  auto late = ends.Get(kSlot, In(milliseconds(200)));
  EXPECT_TRUE(absl::IsUnavailable(late.status())) << late.status();
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
  kafka.Release(1);
  EXPECT_TRUE(stuck.get().ok());
}

TEST(SlotEnds, AFailedQueryFailsTheCallsItAnswers) {
  SlotEnds ends([](const Slot&, Clock::time_point) -> absl::StatusOr<int64_t> {
    return absl::UnavailableError("broker down");
  });
  auto end = ends.Get(kSlot, In(milliseconds(1000)));
  EXPECT_TRUE(absl::IsUnavailable(end.status())) << end.status();
  EXPECT_EQ(ends.queries(), 1u);
}

}  // namespace
}  // namespace wal
