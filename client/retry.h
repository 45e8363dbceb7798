// When walclient retries a failed attempt, and how long it waits first: one rule per kind of call,
// used by unary calls, appends (unary, async and streamed) and reads alike.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>

#include "absl/status/status.h"
#include "wal/v1/wal.pb.h"

namespace wal {

struct RetryPolicy {
  enum class Kind {
    // Namespace calls: UNAVAILABLE says nothing changed; at most max_retries retries.
    kCall,
    // Appends: UNAVAILABLE and DEADLINE_EXCEEDED leave the outcome unknown, and a retry with the
    // same sequences is safe; retried until the call's deadline (max_retries <= 0 turns it off),
    // while an attempt still has a second after the wait.
    kAppend,
    // Reads, before they delivered anything: UNAVAILABLE; at most max_retries retries, while an
    // attempt still has a second after the wait (walserver gives an attempt's catch-up half the
    // time left, so a later one would end as DEADLINE_EXCEEDED rather than say UNAVAILABLE).
    kRead,
  };

  int max_retries = 4;
  std::chrono::milliseconds first_backoff{100};

  // The wait before retry number `retry` (0 for the first) of a call of `kind` whose attempt
  // failed with `code`, or nullopt when the call ends with that failure. `deadline`: the call's,
  // time_point::max() for none. The wait is `first_backoff` doubled per retry before it, at most
  // 2 s, and a random half of it taken off, so that many clients do not retry in step.
  std::optional<std::chrono::milliseconds> Next(
      Kind kind, absl::StatusCode code, int retry,
      std::chrono::system_clock::time_point deadline) const {
    const bool retryable = code == absl::StatusCode::kUnavailable ||
                           (kind == Kind::kAppend && code == absl::StatusCode::kDeadlineExceeded);
    if (!retryable) return std::nullopt;
    if (kind == Kind::kAppend ? max_retries <= 0 : retry >= max_retries) return std::nullopt;
    auto backoff = first_backoff;
    for (int i = 0; i < retry && backoff < std::chrono::seconds(2); ++i) backoff *= 2;
    backoff = std::min<std::chrono::milliseconds>(backoff, std::chrono::seconds(2));
    thread_local std::mt19937 rng(std::random_device{}());
    const std::chrono::milliseconds wait(
        std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(rng));
    const auto needed = kind == Kind::kCall ? wait : wait + std::chrono::seconds(1);
    if (deadline != std::chrono::system_clock::time_point::max() &&
        std::chrono::system_clock::now() + needed >= deadline) {
      return std::nullopt;
    }
    return wait;
  }
};

// Marks an append about to be sent again, its first attempt sent at `first_attempt`: walserver
// then answers the entries an earlier attempt wrote with their ids instead of writing them twice.
inline void MarkRetry(v1::AppendRequest* request,
                      std::chrono::steady_clock::time_point first_attempt) {
  const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - first_attempt)
                       .count();
  request->set_first_attempt_age_ms(static_cast<uint64_t>(std::max<int64_t>(1, age)));
}

}  // namespace wal
