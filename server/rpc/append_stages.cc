#include "server/rpc/append_stages.h"

#include "spdlog/spdlog.h"

namespace wal {

void AppendStages::Record(AppendStage stage, Clock::duration took) {
  const double seconds = std::chrono::duration<double>(took).count();
  metrics_->RecordAppendStage(stage, seconds);
  if (slow_.count() <= 0 || took < slow_) return;
  const Clock::time_point now = Clock::now();
  uint64_t left_out = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - last_log_ < std::chrono::seconds(1)) {
      ++left_out_;
      return;
    }
    last_log_ = now;
    left_out = left_out_;
    left_out_ = 0;
  }
  spdlog::warn(
      "slow append: its {} stage took {:.1f} ms (over --slow_append_ms={}); {} more slow stages "
      "since the last such line (walserver_append_stage_seconds has them all)",
      AppendStageName(stage), seconds * 1000, slow_.count(), left_out);
}

}  // namespace wal
