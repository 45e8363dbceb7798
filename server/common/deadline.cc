#include "server/common/deadline.h"

#include <algorithm>
#include <cstdint>

namespace wal {

Clock::time_point AnswerBy(Clock::time_point deadline) {
  using std::chrono::milliseconds;
  if (deadline == Clock::time_point::max()) return deadline;
  const auto left = deadline - Clock::now();
  return deadline - std::clamp<Clock::duration>(left / 10, milliseconds(10), milliseconds(500));
}

Clock::time_point HalfwayTo(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return deadline;
  const Clock::time_point now = Clock::now();
  return deadline <= now ? deadline : now + (deadline - now) / 2;
}

Clock::time_point Within(Clock::time_point deadline, Clock::duration timeout) {
  const Clock::time_point now = Clock::now();
  // No overflow: a deadline of max() is never added to.
  return deadline - now < timeout ? deadline : now + timeout;
}

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace wal
