#include <gtest/gtest.h>

#include "server/kafka/client.h"

namespace wal {
namespace {

using std::chrono::hours;
using std::chrono::seconds;

TEST(KafkaTimeout, ADeadlineBecomesAtLeastOneMillisecondAndAtMostAnHour) {
  EXPECT_EQ(TimeoutMs(Clock::now() - seconds(5)), 1);  // 0 would not wait at all
  EXPECT_EQ(TimeoutMs(Clock::now() + hours(2)), 3600 * 1000);
  const int left = TimeoutMs(Clock::now() + seconds(3));
  EXPECT_GT(left, 2900);
  EXPECT_LE(left, 3000);
}

TEST(KafkaTimeout, NoDeadlineIsBoundedByTheKafkaRequestTimeout) {
  const int none = TimeoutMs(Clock::time_point::max());
  EXPECT_GT(none, kKafkaRequestTimeout.count() - 100);
  EXPECT_LE(none, kKafkaRequestTimeout.count());
  const Clock::time_point soon = Clock::now() + seconds(1);
  EXPECT_EQ(Bounded(soon), soon);
  const Clock::time_point before = Clock::now();
  const Clock::time_point bounded = Bounded(Clock::time_point::max());
  const Clock::time_point after = Clock::now();
  EXPECT_GE(bounded, before + kKafkaRequestTimeout);
  EXPECT_LE(bounded, after + kKafkaRequestTimeout);
}

}  // namespace
}  // namespace wal
