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

// The stages of an append, each timed by the code that ends it: from the server reading it to
// handing its records to the producers, or to its refusal (checks, catching up with the metadata
// topic); from there to Kafka acknowledging its last record; from then to its answer leaving on
// the append stream (unary calls do not time this stage).
enum class AppendStage { kStart, kKafka, kAnswer };
inline constexpr int kAppendStages = 3;
const char* AppendStageName(AppendStage stage);

class Metrics {
 public:
  using Collector = std::function<void(MetricWriter&)>;

  // Calls by method and status code, with a latency histogram.
  void RecordCall(absl::string_view method, int code, double seconds);
  // One append's time in one stage, into a histogram per stage (without a lock: every append
  // passes here up to three times).
  void RecordAppendStage(AppendStage stage, double seconds);

  std::atomic<uint64_t> append_bytes{0};
  std::atomic<uint64_t> append_entries{0};
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> read_scanned_bytes{0};
  std::atomic<uint64_t> read_entries{0};
  std::atomic<uint64_t> read_fenced_entries{0};
  std::atomic<uint64_t> read_duplicate_entries{0};
  std::atomic<uint64_t> read_scans{0};
  std::atomic<uint64_t> read_scan_rewinds{0};
  std::atomic<uint64_t> read_scan_detaches{0};
  std::atomic<uint64_t> read_index_skips{0};
  std::atomic<uint64_t> read_fetch_size_changes{0};
  std::atomic<uint64_t> read_index_drops{0};
  std::atomic<uint64_t> read_index_saves{0};
  std::atomic<uint64_t> read_index_restores{0};
  std::atomic<uint64_t> read_torn_entries{0};
  std::atomic<uint64_t> read_gaps{0};
  std::atomic<uint64_t> appends_fenced{0};
  std::atomic<uint64_t> append_checksum_mismatches{0};
  std::atomic<uint64_t> append_retries_looked_up{0};
  std::atomic<uint64_t> append_retried_entries_found{0};
  std::atomic<uint64_t> stale_leader_drops{0};
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
  // Render's plain counters and gauges.
  void RenderCounters(MetricWriter& w) const;

  struct CallStats {
    uint64_t count = 0;
    double sum = 0;
    std::vector<uint64_t> buckets;  // cumulative at render time, per bucket here
  };
  struct StageStats {
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> sum_ns{0};
    std::atomic<uint64_t> buckets[14] = {};  // one per latency bucket of metrics.cc
  };
  StageStats stages_[kAppendStages];
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, CallStats> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<Collector> collectors_ ABSL_GUARDED_BY(mu_);
};

// Health checks whose metadata carries kInternalCallKey set to InternalCallToken() are
// walserver's own (rpc/callback_threads_awake.h) and are not counted. The token is random per
// process, so that no client can keep its calls out of the figures.
inline constexpr char kInternalCallKey[] = "walserver-internal";
const std::string& InternalCallToken();

// Records every RPC (method, final status code, latency) into Metrics, but walserver's own.
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
