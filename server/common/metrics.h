// Prometheus metrics, written by hand in the text exposition format. Every family is declared
// once in the table in metrics.cc (name, type, help). Hot-path counters are atomics; the rest is
// read from its owner at scrape time through collectors.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/server_interceptor.h"

namespace wal {

// Appends Prometheus samples of one family: `family` must be in the table of metrics.cc.
class MetricWriter {
 public:
  explicit MetricWriter(std::string* out) : out_(out) {}
  // One sample; labels are name/value pairs, values escaped here.
  void Sample(absl::string_view family,
              const std::vector<std::pair<std::string, std::string>>& labels, double value,
              absl::string_view suffix = "");

 private:
  void Header(absl::string_view family);
  std::string* out_;
  std::vector<std::string> seen_;
};

class Metrics {
 public:
  using Collector = std::function<void(MetricWriter&)>;

  // Calls by method and status code, with a latency histogram.
  void RecordCall(absl::string_view method, int code, double seconds);

  std::atomic<uint64_t> append_bytes{0};
  std::atomic<uint64_t> append_entries{0};
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> read_entries{0};
  std::atomic<uint64_t> read_fenced_entries{0};
  std::atomic<uint64_t> read_duplicate_entries{0};
  std::atomic<uint64_t> read_scans{0};
  std::atomic<uint64_t> read_scan_rewinds{0};
  std::atomic<uint64_t> read_scan_detaches{0};
  std::atomic<uint64_t> read_torn_entries{0};
  std::atomic<uint64_t> read_gaps{0};
  std::atomic<uint64_t> appends_fenced{0};
  std::atomic<uint64_t> append_checksum_mismatches{0};
  std::atomic<uint64_t> pruned_records{0};
  std::atomic<uint64_t> prune_refusals{0};
  std::atomic<int64_t> prune_logical{0};
  std::atomic<int64_t> appends_in_flight{0};
  std::atomic<int64_t> reads_in_progress{0};

  // Adds a source of gauges read at scrape time; collectors must outlive Render calls.
  void AddCollector(Collector collector);
  // The whole exposition text.
  std::string Render() const;

 private:
  struct CallStats {
    uint64_t count = 0;
    double sum = 0;
    std::vector<uint64_t> buckets;  // cumulative at render time, per bucket here
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, CallStats> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<Collector> collectors_ ABSL_GUARDED_BY(mu_);
};

// Records every RPC (method, final status code, latency) into Metrics.
class MetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(Metrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  Metrics* metrics_;
};

// Turns librdkafka's statistics JSON into samples: broker connection state, queue depth and
// traffic counters of one client.
void WriteKafkaStats(const std::string& client, const std::string& stats_json, MetricWriter& w);

}  // namespace wal
