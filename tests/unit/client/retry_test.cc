#include "client/retry.h"

#include <gtest/gtest.h>

namespace wal {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::system_clock;
using Kind = RetryPolicy::Kind;

constexpr auto kNone = system_clock::time_point::max();

TEST(RetryPolicy, CallsAndReadsRetryOnlyUnavailableAndAtMostMaxRetries) {
  const RetryPolicy policy{3, milliseconds(100)};
  for (Kind kind : {Kind::kCall, Kind::kRead}) {
    EXPECT_TRUE(policy.Next(kind, absl::StatusCode::kUnavailable, 0, kNone));
    EXPECT_TRUE(policy.Next(kind, absl::StatusCode::kUnavailable, 2, kNone));
    EXPECT_FALSE(policy.Next(kind, absl::StatusCode::kUnavailable, 3, kNone));
    EXPECT_FALSE(policy.Next(kind, absl::StatusCode::kDeadlineExceeded, 0, kNone));
    EXPECT_FALSE(policy.Next(kind, absl::StatusCode::kNotFound, 0, kNone));
    // The wait must end before the deadline.
    EXPECT_FALSE(policy.Next(kind, absl::StatusCode::kUnavailable, 0,
                             system_clock::now() + milliseconds(40)));
  }
}

TEST(RetryPolicy, AReadIsRetriedOnlyWithASecondLeftForTheAttempt) {
  // walserver gives an attempt's catch-up with Kafka half the time left: a retry with less than a
  // second after its wait would end DEADLINE_EXCEEDED where the read could say UNAVAILABLE.
  const RetryPolicy policy{3, milliseconds(100)};
  EXPECT_FALSE(policy.Next(Kind::kRead, absl::StatusCode::kUnavailable, 0,
                           system_clock::now() + milliseconds(900)));
  EXPECT_TRUE(policy.Next(Kind::kRead, absl::StatusCode::kUnavailable, 0,
                          system_clock::now() + seconds(5)));
  // Namespace calls need only the wait.
  EXPECT_TRUE(policy.Next(Kind::kCall, absl::StatusCode::kUnavailable, 0,
                          system_clock::now() + milliseconds(900)));
}

TEST(RetryPolicy, AppendsRetryUnknownOutcomesUntilTheirDeadline) {
  const RetryPolicy policy{3, milliseconds(100)};
  EXPECT_TRUE(policy.Next(Kind::kAppend, absl::StatusCode::kUnavailable, 0, kNone));
  EXPECT_TRUE(policy.Next(Kind::kAppend, absl::StatusCode::kDeadlineExceeded, 0, kNone));
  // Not bounded by max_retries: the sequences make every retry safe.
  EXPECT_TRUE(policy.Next(Kind::kAppend, absl::StatusCode::kUnavailable, 50, kNone));
  EXPECT_FALSE(policy.Next(Kind::kAppend, absl::StatusCode::kFailedPrecondition, 0, kNone));
  // An attempt needs a second after the wait.
  EXPECT_FALSE(policy.Next(Kind::kAppend, absl::StatusCode::kUnavailable, 0,
                           system_clock::now() + milliseconds(900)));
  EXPECT_TRUE(policy.Next(Kind::kAppend, absl::StatusCode::kUnavailable, 0,
                          system_clock::now() + seconds(5)));
  // max_retries 0 (or below) turns retries off.
  for (int max_retries : {0, -1}) {
    const RetryPolicy off{max_retries, milliseconds(100)};
    EXPECT_FALSE(off.Next(Kind::kAppend, absl::StatusCode::kUnavailable, 0, kNone));
  }
}

TEST(RetryPolicy, WaitsDoubleUpToTwoSecondsWithJitterOfHalf) {
  const RetryPolicy policy{100, milliseconds(100)};
  for (int round = 0; round < 50; ++round) {
    for (int retry = 0; retry < 8; ++retry) {
      const milliseconds full =
          std::min<milliseconds>(milliseconds(100) * (1 << retry), seconds(2));
      const auto wait = policy.Next(Kind::kRead, absl::StatusCode::kUnavailable, retry, kNone);
      ASSERT_TRUE(wait);
      EXPECT_GE(*wait, full / 2) << "retry " << retry;
      EXPECT_LE(*wait, full) << "retry " << retry;
    }
  }
}

}  // namespace
}  // namespace wal
