#include "server/rpc/append_stages.h"

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace wal {
namespace {

using std::chrono::milliseconds;

// Captures what spdlog's default logger writes while it lives.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::vector<std::string> Lines() const {
    return absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

TEST(AppendStages, EveryStageIsCountedInItsOwnHistogram) {
  Metrics metrics;
  AppendStages stages(&metrics, milliseconds(0));
  stages.Record(AppendStage::kStart, milliseconds(0));
  stages.Record(AppendStage::kKafka, milliseconds(3));
  stages.Record(AppendStage::kKafka, milliseconds(30));
  stages.Record(AppendStage::kAnswer, milliseconds(2));
  const std::string text = metrics.Render();
  EXPECT_TRUE(absl::StrContains(text, "walserver_append_stage_seconds_count{stage=\"start\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "walserver_append_stage_seconds_count{stage=\"kafka\"} 2\n"));
  EXPECT_TRUE(
      absl::StrContains(text, "walserver_append_stage_seconds_count{stage=\"answer\"} 1\n"));
  // 3 ms falls in the 0.005 bucket, 30 ms only from the 0.05 one on.
  EXPECT_TRUE(absl::StrContains(
      text, "walserver_append_stage_seconds_bucket{stage=\"kafka\",le=\"0.005\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "walserver_append_stage_seconds_bucket{stage=\"kafka\",le=\"0.05\"} 2\n"));
  // The sum in seconds, from nanoseconds: 0.033 up to the last digits of a double.
  EXPECT_TRUE(absl::StrContains(text, "walserver_append_stage_seconds_sum{stage=\"kafka\"} 0.033"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE walserver_append_stage_seconds histogram\n"));
}

TEST(AppendStages, ASlowStageIsLoggedWithItsNameAndTimeAtMostOnceASecond) {
  Metrics metrics;
  AppendStages stages(&metrics, milliseconds(100));
  CapturedLog log;
  stages.Record(AppendStage::kKafka, milliseconds(99));  // under the threshold
  EXPECT_TRUE(log.Lines().empty());
  stages.Record(AppendStage::kKafka, milliseconds(150));
  ASSERT_EQ(log.Lines().size(), 1u);
  EXPECT_TRUE(absl::StrContains(log.Lines()[0], "its kafka stage took 150.0 ms")) << log.Lines()[0];
  // Within the same second: counted, not logged.
  stages.Record(AppendStage::kAnswer, milliseconds(400));
  EXPECT_EQ(log.Lines().size(), 1u);
  EXPECT_TRUE(absl::StrContains(metrics.Render(),
                                "walserver_append_stage_seconds_count{stage=\"answer\"} 1\n"));
}

TEST(AppendStages, ZeroLogsNothing) {
  Metrics metrics;
  AppendStages stages(&metrics, milliseconds(0));
  CapturedLog log;
  stages.Record(AppendStage::kStart, std::chrono::seconds(5));
  EXPECT_TRUE(log.Lines().empty());
}

}  // namespace
}  // namespace wal
