// How walclient waits between retries; shared by its unary and streamed calls.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace wal {

// A random wait in [backoff/2, backoff], so that many clients do not retry in step.
inline std::chrono::milliseconds RetryJitter(std::chrono::milliseconds backoff) {
  thread_local std::mt19937 rng(std::random_device{}());
  return std::chrono::milliseconds(
      std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(rng));
}

// `first`, doubled for each retry before this one, at most 2 s.
inline std::chrono::milliseconds RetryBackoff(std::chrono::milliseconds first, int retry) {
  auto b = first;
  for (int i = 0; i < retry && b < std::chrono::seconds(2); ++i) b *= 2;
  return std::min<std::chrono::milliseconds>(b, std::chrono::seconds(2));
}

}  // namespace wal
