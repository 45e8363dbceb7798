#include "server/meta/shared_catch_up.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace wal {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A catch-up that the test lets finish, one call at a time, and that records when calls begin.
class FakeCatchUp {
 public:
  absl::Status operator()(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    ++begun_;
    deadlines_.push_back(deadline);
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_ >= begun_; });
    return next_status_;
  }
  void WaitBegun(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, seconds(10), [&] { return begun_ >= n; }));
  }
  void Release(int n, absl::Status status = absl::OkStatus()) {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = n;
    next_status_ = std::move(status);
    cv_.notify_all();
  }
  int begun() {
    std::lock_guard<std::mutex> lock(mu_);
    return begun_;
  }
  std::vector<Clock::time_point> deadlines() {
    std::lock_guard<std::mutex> lock(mu_);
    return deadlines_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int begun_ = 0;
  int released_ = 0;
  absl::Status next_status_;
  std::vector<Clock::time_point> deadlines_;
};

// Answers collected from the catch-up's thread.
class Answers {
 public:
  SharedCatchUp::Then Add(std::function<void()> on_answer = [] {}) {
    return [this, on_answer](absl::Status s) {
      on_answer();
      std::lock_guard<std::mutex> lock(mu_);
      statuses_.push_back(std::move(s));
      cv_.notify_all();
    };
  }
  std::vector<absl::Status> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, seconds(10), [&] { return statuses_.size() >= n; }));
    return statuses_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<absl::Status> statuses_;
};

TEST(SharedCatchUp, CallersArrivingDuringARoundShareTheNextOne) {
  FakeCatchUp fake;
  Answers answers;
  SharedCatchUp catch_up([&](Clock::time_point d) { return fake(d); });
  const auto deadline = Clock::now() + seconds(30);
  catch_up.After(deadline, answers.Add());
  fake.WaitBegun(1);
  // 100 callers arrive while the first round runs: it began before them, so it cannot serve
  // them; one more round serves them all.
  std::atomic<int> answered_before_second_round{0};
  for (int i = 0; i < 100; ++i) {
    catch_up.After(deadline, answers.Add([&] {
      if (fake.begun() < 2) ++answered_before_second_round;
    }));
  }
  fake.Release(1);
  fake.WaitBegun(2);
  fake.Release(2);
  const std::vector<absl::Status> got = answers.WaitFor(101);
  ASSERT_EQ(got.size(), 101u);
  for (const absl::Status& s : got) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(catch_up.rounds(), 2u);
  EXPECT_EQ(answered_before_second_round.load(), 0)
      << "a caller was answered by a round that began before it arrived";
}

TEST(SharedCatchUp, CallersPastTheirDeadlineAreAnsweredWithoutARound) {
  FakeCatchUp fake;
  Answers answers;
  SharedCatchUp catch_up([&](Clock::time_point d) { return fake(d); });
  catch_up.After(Clock::now() - milliseconds(1), answers.Add());
  const std::vector<absl::Status> got = answers.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(absl::IsDeadlineExceeded(got[0])) << got[0];
  EXPECT_EQ(catch_up.rounds(), 0u);
}

TEST(SharedCatchUp, ACallerIsAnsweredByItsDeadlineWhileARoundBoundByALaterOneRuns) {
  FakeCatchUp fake;
  Answers answers;
  SharedCatchUp catch_up([&](Clock::time_point d) { return fake(d); });
  const auto long_deadline = Clock::now() + seconds(30);
  catch_up.After(long_deadline, answers.Add());
  fake.WaitBegun(1);
  // Arrives during the round, so it must wait for the next one, which cannot begin in time.
  catch_up.After(Clock::now() + milliseconds(100), answers.Add());
  const std::vector<absl::Status> early = answers.WaitFor(1);
  ASSERT_EQ(early.size(), 1u);
  EXPECT_TRUE(absl::IsDeadlineExceeded(early[0])) << early[0];
  fake.Release(1);
  const std::vector<absl::Status> got = answers.WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[1].ok()) << got[1];
  EXPECT_EQ(catch_up.rounds(), 1u) << "no round for a caller whose deadline passed";
  ASSERT_EQ(fake.deadlines().size(), 1u);
  EXPECT_EQ(fake.deadlines()[0], long_deadline) << "a round runs to its latest caller's deadline";
}

TEST(SharedCatchUp, ARoundBoundByTheLatestDeadlineServesCallersWithLessTime) {
  FakeCatchUp fake;
  Answers answers;
  SharedCatchUp catch_up([&](Clock::time_point d) { return fake(d); });
  catch_up.After(Clock::now() + seconds(30), answers.Add());
  fake.WaitBegun(1);
  const auto short_deadline = Clock::now() + seconds(20);
  const auto long_deadline = Clock::now() + seconds(40);
  catch_up.After(short_deadline, answers.Add());
  catch_up.After(long_deadline, answers.Add());
  fake.Release(1);
  fake.WaitBegun(2);
  fake.Release(2, absl::UnavailableError("Kafka is slow"));
  const std::vector<absl::Status> got = answers.WaitFor(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[0].ok()) << got[0];
  // A failed round fails everyone in it, as one catch-up per caller would have.
  EXPECT_TRUE(absl::IsUnavailable(got[1])) << got[1];
  EXPECT_TRUE(absl::IsUnavailable(got[2])) << got[2];
  ASSERT_EQ(fake.deadlines().size(), 2u);
  EXPECT_EQ(fake.deadlines()[1], long_deadline);
}

// Shutdown does not wait for the round in progress (it may be blocked on Kafka): its callers and
// those waiting for the next one are answered at once, and later callers too.
TEST(SharedCatchUp, StopAnswersEveryCallerAtOnce) {
  FakeCatchUp fake;
  Answers answers;
  SharedCatchUp catch_up([&](Clock::time_point d) { return fake(d); });
  catch_up.After(Clock::now() + seconds(30), answers.Add());
  fake.WaitBegun(1);
  for (int i = 0; i < 10; ++i) catch_up.After(Clock::now() + seconds(30), answers.Add());
  catch_up.Stop();
  catch_up.After(Clock::now() + seconds(30), answers.Add());
  const std::vector<absl::Status> got = answers.WaitFor(12);
  ASSERT_EQ(got.size(), 12u);
  for (const absl::Status& s : got) EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  fake.Release(1);  // the round ends; its answer comes too late to count
  EXPECT_EQ(catch_up.rounds(), 1u);
}

TEST(SharedCatchUp, EveryCallerIsAnsweredWhenItIsDestroyed) {
  FakeCatchUp fake;
  Answers answers;
  {
    SharedCatchUp catch_up([&](Clock::time_point d) { return fake(d); });
    catch_up.After(Clock::now() + seconds(30), answers.Add());
    fake.WaitBegun(1);
    for (int i = 0; i < 10; ++i) catch_up.After(Clock::now() + seconds(30), answers.Add());
    // The destructor waits for the round in progress; a second round may or may not begin
    // before it stops the loop.
    fake.Release(2);
  }
  const std::vector<absl::Status> got = answers.WaitFor(11);
  ASSERT_EQ(got.size(), 11u);
  EXPECT_TRUE(got[0].ok()) << got[0];
  for (const absl::Status& s : got) EXPECT_TRUE(s.ok() || absl::IsUnavailable(s)) << s;
}

}  // namespace
}  // namespace wal
