#include "server/common/deadline.h"

#include <gtest/gtest.h>

namespace wal {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(Deadline, AnswerByLeavesATenthBetweenTenAndFiveHundredMs) {
  EXPECT_EQ(AnswerBy(Clock::time_point::max()), Clock::time_point::max());
  const Clock::time_point far = Clock::now() + seconds(100);
  EXPECT_EQ(far - AnswerBy(far), milliseconds(500));
  const Clock::time_point near = Clock::now() + milliseconds(50);
  EXPECT_EQ(near - AnswerBy(near), milliseconds(10));
  const Clock::time_point mid = Clock::now() + seconds(2);
  const auto margin = mid - AnswerBy(mid);
  EXPECT_GT(margin, milliseconds(190));
  EXPECT_LE(margin, milliseconds(200));
}

TEST(Deadline, WithinTakesTheEarlier) {
  const Clock::time_point soon = Clock::now() + milliseconds(100);
  EXPECT_EQ(Within(soon, seconds(10)), soon);
  const Clock::time_point bounded = Within(Clock::time_point::max(), seconds(10));
  EXPECT_LT(bounded, Clock::now() + seconds(11));
  EXPECT_GT(bounded, Clock::now() + seconds(9));
}

TEST(Deadline, HalfwayToHalvesTheTimeLeft) {
  EXPECT_EQ(HalfwayTo(Clock::time_point::max()), Clock::time_point::max());
  const Clock::time_point past = Clock::now() - seconds(1);
  EXPECT_EQ(HalfwayTo(past), past);
  const Clock::time_point before = Clock::now();
  const Clock::time_point halfway = HalfwayTo(before + seconds(4));
  EXPECT_GE(halfway, before + seconds(2));
  EXPECT_LE(halfway, Clock::now() + seconds(2));
}

}  // namespace
}  // namespace wal
