#include "server/common/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace wal {
namespace {

// Sample lines of an exposition, "name{labels}" -> value; HELP and TYPE lines counted apart.
struct Exposition {
  std::map<std::string, double> samples;
  std::map<std::string, int> help_lines;  // per family
  std::map<std::string, std::string> types;
};

Exposition Parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "# HELP ")) {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      ++e.help_lines[parts[2]];
      continue;
    }
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      e.types[parts[2]] = parts[3];
      continue;
    }
    const size_t space = line.rfind(' ');
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &value)) << line;
    e.samples[line.substr(0, space)] = value;
  }
  return e;
}

TEST(Metrics, CountersAndGaugesAppearWithTheirTypes) {
  Metrics m;
  m.append_entries += 3;
  m.appends_in_flight = 2;
  const Exposition e = Parse(m.Render());
  EXPECT_EQ(e.samples.at("walserver_append_entries_total"), 3);
  EXPECT_EQ(e.samples.at("walserver_appends_in_flight"), 2);
  EXPECT_EQ(e.types.at("walserver_append_entries_total"), "counter");
  EXPECT_EQ(e.types.at("walserver_appends_in_flight"), "gauge");
  for (const auto& [family, count] : e.help_lines) EXPECT_EQ(count, 1) << family;
}

TEST(Metrics, LatencyHistogramIsCumulativeAndEndsAtTheCount) {
  Metrics m;
  m.RecordCall("Append", 0, 0.0004);  // first bucket
  m.RecordCall("Append", 0, 0.003);   // the 0.005 bucket
  m.RecordCall("Append", 0, 30);      // past the last bucket: only +Inf
  m.RecordCall("Read", 14, 0.2);
  const Exposition e = Parse(m.Render());
  const std::string ok = R"(method="Append",code="OK")";
  EXPECT_EQ(e.samples.at("walserver_rpc_calls_total{" + ok + "}"), 3);
  EXPECT_EQ(e.samples.at(R"(walserver_rpc_calls_total{method="Read",code="UNAVAILABLE"})"), 1);
  const auto bucket = [&](const std::string& le) {
    return e.samples.at("walserver_rpc_latency_seconds_bucket{" + ok + ",le=\"" + le + "\"}");
  };
  EXPECT_EQ(bucket("0.0005"), 1);
  EXPECT_EQ(bucket("0.0025"), 1);
  EXPECT_EQ(bucket("0.005"), 2);
  EXPECT_EQ(bucket("10"), 2);
  EXPECT_EQ(bucket("+Inf"), 3);
  EXPECT_EQ(e.samples.at("walserver_rpc_latency_seconds_count{" + ok + "}"), 3);
  EXPECT_NEAR(e.samples.at("walserver_rpc_latency_seconds_sum{" + ok + "}"), 30.0034, 1e-9);
  EXPECT_EQ(e.types.at("walserver_rpc_latency_seconds"), "histogram");
}

TEST(Metrics, CollectorsAddSamplesAndLabelValuesAreEscaped) {
  Metrics m;
  m.AddCollector([](MetricWriter& w) {
    w.Sample("walserver_slot_namespaces", {{"topic", "a\"b\\c\nd"}, {"partition", "0"}}, 7);
    w.Sample("walserver_slot_namespaces", {{"topic", "x"}, {"partition", "1"}}, 8);
  });
  const std::string text = m.Render();
  EXPECT_TRUE(absl::StrContains(
      text, "walserver_slot_namespaces{topic=\"a\\\"b\\\\c\\nd\",partition=\"0\"} 7\n"))
      << text;
  const Exposition e = Parse(text);
  EXPECT_EQ(e.samples.at(R"(walserver_slot_namespaces{topic="x",partition="1"})"), 8);
  EXPECT_EQ(e.help_lines.at("walserver_slot_namespaces"), 1);
}

TEST(Metrics, KafkaStatisticsBecomeBrokerStateAndTraffic) {
  std::string out;
  MetricWriter w(&out);
  WriteKafkaStats("p0",
                  R"({"tx_bytes": 10, "rx_bytes": 20, "txmsgs": 3, "tx": 2, "brokers": {
                        "b1:9092/1": {"state": "UP", "source": "configured"},
                        "b2:9092/2": {"state": "DOWN", "source": "learned"},
                        "GroupCoordinator": {"state": "UP", "source": "internal"}}})",
                  w);
  const Exposition e = Parse(out);
  EXPECT_EQ(e.samples.at(R"(walserver_kafka_tx_bytes_total{client="p0"})"), 10);
  EXPECT_EQ(e.samples.at(R"(walserver_kafka_tx_requests_total{client="p0"})"), 2);
  EXPECT_EQ(e.samples.at(R"(walserver_kafka_broker_up{client="p0",broker="b1:9092/1"})"), 1);
  EXPECT_EQ(e.samples.at(R"(walserver_kafka_broker_up{client="p0",broker="b2:9092/2"})"), 0);
  EXPECT_EQ(e.samples.count(R"(walserver_kafka_broker_up{client="p0",broker="GroupCoordinator"})"),
            0u);
  std::string nothing;
  MetricWriter quiet(&nothing);
  WriteKafkaStats("p0", "not json", quiet);
  EXPECT_EQ(nothing, "");
}

}  // namespace
}  // namespace wal
