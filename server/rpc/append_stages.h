// Times the stages of appends (Metrics::RecordAppendStage) and logs every stage that took longer
// than --slow_append_ms, so that a stall can be placed: in walserver before Kafka, in Kafka, or
// on the answer's way back. At most one line a second; it counts the slow stages it left out.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "server/common/deadline.h"
#include "server/common/metrics.h"

namespace wal {

class AppendStages {
 public:
  // `slow` of zero logs nothing.
  AppendStages(Metrics* metrics, std::chrono::milliseconds slow) : metrics_(metrics), slow_(slow) {}

  void Record(AppendStage stage, Clock::duration took);

 private:
  Metrics* const metrics_;
  const std::chrono::milliseconds slow_;
  std::mutex mu_;
  Clock::time_point last_log_ ABSL_GUARDED_BY(mu_);
  uint64_t left_out_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace wal
