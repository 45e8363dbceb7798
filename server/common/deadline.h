// Deadlines as every layer handles them: absolute steady-clock time points, time_point::max()
// for none. A gRPC call's deadline becomes one at the edge (rpc/), travels down unchanged, and
// becomes a librdkafka timeout in milliseconds only at the call into librdkafka (kafka/client.h,
// TimeoutMs).
#pragma once

#include <chrono>
#include <cstdint>

namespace wal {

using Clock = std::chrono::steady_clock;

// How long a bounded wait on Kafka may take when nothing else bounds it: a metadata round trip,
// a watermark query, a topic lookup. Every caller's own deadline still comes first.
inline constexpr std::chrono::milliseconds kKafkaRequestTimeout{10000};

// When to give up on work for a caller whose deadline is `deadline`: a tenth of the time left
// before it (10 ms to 500 ms), so the caller hears why instead of timing out blind.
// time_point::max() (no deadline) stays max().
Clock::time_point AnswerBy(Clock::time_point deadline);

// Halfway from now to `deadline`; max() stays max().
Clock::time_point HalfwayTo(Clock::time_point deadline);

// The earlier of `deadline` and `timeout` from now.
Clock::time_point Within(Clock::time_point deadline, Clock::duration timeout);

// Milliseconds since the Unix epoch by this host's wall clock: the time records carry and Kafka
// looks up by. Never for a deadline (wall clocks jump).
int64_t UnixNowMs();

}  // namespace wal
