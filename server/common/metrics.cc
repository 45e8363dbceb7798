#include "server/common/metrics.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/server_context.h"
#include "server/common/deadline.h"

namespace wal {
namespace {

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

// Every metric walserver exports.
constexpr Family kFamilies[] = {
    {"walserver_build_info", "gauge",
     "Always 1; its labels name walserver's version and the librdkafka it runs."},
    {"walserver_rpc_calls_total", "counter", "gRPC calls by method and status code."},
    {"walserver_rpc_latency_seconds", "histogram",
     "gRPC call latency from arrival to status, by method and status code."},
    {"walserver_append_bytes_total", "counter", "Entry bytes acknowledged by Kafka."},
    {"walserver_append_entries_total", "counter", "Entries acknowledged by Kafka."},
    {"walserver_read_bytes_total", "counter", "Entry bytes streamed to readers."},
    {"walserver_read_scanned_bytes_total", "counter",
     "Record bytes (decompressed values) slot scans handed out for reads, wanted or not, again "
     "when a scan goes back: beside walserver_read_bytes_total, what sharing slots costs reads."},
    {"walserver_read_entries_total", "counter", "Entries streamed to readers."},
    {"walserver_read_fenced_entries_total", "counter",
     "Entries reads dropped because a fence of a newer writer epoch preceded them."},
    {"walserver_read_duplicate_entries_total", "counter",
     "Entries reads dropped as a retried copy (same writer id and sequence) of an earlier one."},
    {"walserver_read_scans_total", "counter",
     "Scans of a slot started for reads; reads of one slot that arrive together share one."},
    {"walserver_read_scan_rewinds_total", "counter",
     "Times a scan went back for reads that joined behind it, instead of starting another."},
    {"walserver_read_scan_detaches_total", "counter",
     "Reads taken off a shared scan because their client did not keep up (their queue was "
     "full); each carries on with a scan of its own once its client pulls again."},
    {"walserver_read_index_skips_total", "counter",
     "Times a scan went past records of its slot that the slot's index says none of its reads "
     "needs; what is skipped shows as walserver_read_scanned_bytes_total not rising."},
    {"walserver_read_fetch_size_changes_total", "counter",
     "Times a scan changed to narrow fetches (it skips) or back to wide ones (it reads every "
     "record again)."},
    {"walserver_read_index_drops_total", "counter",
     "Times a slot's index was dropped because it may describe another log: the topic's id "
     "changed (made again) or could not be had, or the partition's end went back. Rising "
     "steadily: reads cannot get the topic's id, and scans read every record."},
    {"walserver_read_index_saves_total", "counter",
     "Slot indexes saved to the <prefix>_index topic, so that a walserver starting on these "
     "topics skips from its first reads."},
    {"walserver_read_index_restores_total", "counter",
     "Slot indexes this walserver took from the <prefix>_index topic when it started."},
    {"walserver_read_torn_entries_total", "counter",
     "Split entries reads gave up on because the slot showed they can never complete (their "
     "writer crashed or failed mid-entry)."},
    {"walserver_read_gaps_total", "counter",
     "Gaps reads with skip_lost went past: records gone from Kafka, or a corrupt entry."},
    {"walserver_appends_fenced_total", "counter",
     "Append calls refused with FAILED_PRECONDITION because the writer's epoch was fenced."},
    {"walserver_append_checksum_mismatches_total", "counter",
     "Append calls refused with INVALID_ARGUMENT because an entry's data did not match the "
     "crc32c its appender sent (corrupted on the way)."},
    {"walserver_append_retries_looked_up_total", "counter",
     "Retried appends (or appends of entries in flight here already) that looked for the copies "
     "their earlier attempts wrote, before writing the others."},
    {"walserver_append_retried_entries_found_total", "counter",
     "Entries of retried appends found written already: answered with that copy's id, not "
     "written again."},
    {"walserver_stale_leader_drops_total", "counter",
     "Times walserver dropped its connections to a broker that named itself leader of a slot "
     "whose records waited unanswered while most of the other brokers named another."},
    {"walserver_appends_in_flight", "gauge", "Append calls waiting for Kafka."},
    {"walserver_append_bytes_in_flight", "gauge", "Entry bytes of appends waiting for Kafka."},
    {"walserver_append_bytes_in_flight_limit", "gauge",
     "--max_inflight_append_bytes: an append beyond it gets RESOURCE_EXHAUSTED."},
    {"walserver_reads_in_progress", "gauge", "Read streams running."},
    {"walserver_name_conflicts_total", "counter",
     "Other walservers that announced this server's --name since it started: two live "
     "walservers must not share one (docs/OPERATIONS.md, --name)."},
    {"walserver_records_skipped_total", "counter",
     "Records that could not be decoded (foreign producers, unknown versions, corruption), by "
     "topic kind."},
    {"walserver_namespaces", "gauge", "Live namespaces."},
    {"walserver_slot_namespaces", "gauge", "Live namespaces per slot."},
    {"walserver_slot_lowest_first_entry_id", "gauge",
     "Per slot with live namespaces, their lowest first_entry_id: no readable entry lies below."},
    {"walserver_slot_pruned_before", "gauge",
     "Per slot, the recorded pruning point: records below it are deleted (DeleteRecords)."},
    {"walserver_pruned_records_total", "counter",
     "Records this server deleted from the slots because no live namespace could read them."},
    {"walserver_prune_refusals_total", "counter",
     "DeleteRecords calls the Kafka cluster refused for good (a policy, an ACL, no support)."},
    {"walserver_prune_logical", "gauge",
     "1 when truncation is logical only (--prune_mode=logical, auto after a refusal, or "
     "--prune_interval_ms=0): truncated records stay in Kafka."},
    {"walserver_kafka_producer_queue_messages", "gauge",
     "Messages and requests in a producer's librdkafka queues."},
    {"walserver_packed_records_total", "counter",
     "Kafka records produced that carry the entries of several namespaces (group commit)."},
    {"walserver_packed_entries_total", "counter",
     "Entries (and fences) produced in packed records; over walserver_packed_records_total, "
     "the entries one record carried on average."},
    {"walserver_kafka_broker_up", "gauge",
     "1 if the client's connection to the broker is up, from librdkafka statistics."},
    {"walserver_kafka_tx_bytes_total", "counter", "Bytes sent to Kafka brokers (librdkafka)."},
    {"walserver_kafka_rx_bytes_total", "counter",
     "Bytes received from Kafka brokers (librdkafka)."},
    {"walserver_kafka_tx_messages_total", "counter", "Messages sent to Kafka (librdkafka)."},
    {"walserver_kafka_tx_requests_total", "counter",
     "Requests of every kind sent to Kafka brokers (librdkafka); under load, messages per "
     "request show how well produce calls are batched."},
    {"walserver_append_stage_seconds", "histogram",
     "Time appends spent in each stage: start (checks, until their records are handed to the "
     "producers or the append is refused), kafka (until Kafka acknowledged the last record), "
     "answer (until the answer left on the append stream). --slow_append_ms logs the appends "
     "whose stage took longer."},
    {"walserver_meta_healthy", "gauge",
     "1 while the metadata topic is being tailed without error."},
};

constexpr double kLatencyBuckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1,    0.25,  0.5,    1,     2.5,  5,     10};
constexpr size_t kBucketCount = sizeof(kLatencyBuckets) / sizeof(kLatencyBuckets[0]);
static_assert(kBucketCount == 14, "Metrics::StageStats::buckets has one counter per bucket");

const Family* FindFamily(absl::string_view name) {
  for (const Family& f : kFamilies) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

std::string Escape(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

const char* CodeName(int code) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
}

class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(grpc::experimental::ServerRpcInfo* info, Metrics* metrics)
      : info_(info), metrics_(metrics), start_(Clock::now()) {
    // "/wal.v1.WalService/Append" -> "Append"
    const absl::string_view full = info->method();
    method_ = std::string(full.substr(full.rfind('/') + 1));
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS) &&
        !Internal()) {
      const std::chrono::duration<double> elapsed = Clock::now() - start_;
      metrics_->RecordCall(method_, methods->GetSendStatus().error_code(), elapsed.count());
    }
    methods->Proceed();
  }

 private:
  // Only health checks can be walserver's own: other calls skip the metadata lookup.
  bool Internal() const {
    if (method_ != "Check") return false;
    const auto& metadata = info_->server_context()->client_metadata();
    auto it = metadata.find(kInternalCallKey);
    return it != metadata.end() && it->second == InternalCallToken();
  }

  grpc::experimental::ServerRpcInfo* info_;
  Metrics* metrics_;
  std::string method_;
  Clock::time_point start_;
};

}  // namespace

const std::string& InternalCallToken() {
  static const std::string* token = [] {
    std::random_device random;
    return new std::string(
        absl::StrFormat("%08x%08x%08x%08x", random(), random(), random(), random()));
  }();
  return *token;
}

void MetricWriter::Header(absl::string_view family) {
  for (const std::string& s : seen_) {
    if (s == family) return;
  }
  seen_.emplace_back(family);
  const Family* f = FindFamily(family);
  absl::StrAppend(out_, "# HELP ", family, " ", f ? f->help : "", "\n# TYPE ", family, " ",
                  f ? f->type : "untyped", "\n");
}

void MetricWriter::Sample(absl::string_view family,
                          const std::vector<std::pair<std::string, std::string>>& labels,
                          double value, absl::string_view suffix) {
  Header(family);
  absl::StrAppend(out_, family, suffix);
  if (!labels.empty()) {
    out_->push_back('{');
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(out_, i ? "," : "", labels[i].first, "=\"", Escape(labels[i].second), "\"");
    }
    out_->push_back('}');
  }
  absl::StrAppend(out_, " ", absl::StrFormat("%.17g", value), "\n");
}

void Metrics::RecordCall(absl::string_view method, int code, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  CallStats& s = calls_[{std::string(method), code}];
  if (s.buckets.empty()) s.buckets.assign(kBucketCount, 0);
  ++s.count;
  s.sum += seconds;
  for (size_t i = 0; i < kBucketCount; ++i) {
    if (seconds <= kLatencyBuckets[i]) {
      ++s.buckets[i];
      break;
    }
  }
}

const char* AppendStageName(AppendStage stage) {
  switch (stage) {
    case AppendStage::kStart:
      return "start";
    case AppendStage::kKafka:
      return "kafka";
    case AppendStage::kAnswer:
      return "answer";
  }
  return "unknown";
}

void Metrics::RecordAppendStage(AppendStage stage, double seconds) {
  StageStats& s = stages_[static_cast<int>(stage)];
  s.count.fetch_add(1, std::memory_order_relaxed);
  s.sum_ns.fetch_add(static_cast<uint64_t>(std::max(0.0, seconds) * 1e9),
                     std::memory_order_relaxed);
  for (size_t i = 0; i < kBucketCount; ++i) {
    if (seconds <= kLatencyBuckets[i]) {
      s.buckets[i].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
}

void Metrics::AddCollector(Collector collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// One histogram: a cumulative count per bound of kLatencyBuckets (bucket_count(i) is the count in
// bucket i alone), then +Inf, the sum and the count.
template <typename BucketCount>
void WriteHistogram(MetricWriter& w, absl::string_view family, const Labels& labels,
                    BucketCount bucket_count, uint64_t count, double sum) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBucketCount; ++i) {
    cumulative += bucket_count(i);
    Labels with_le = labels;
    with_le.push_back({"le", absl::StrFormat("%g", kLatencyBuckets[i])});
    w.Sample(family, with_le, static_cast<double>(cumulative), "_bucket");
  }
  Labels with_inf = labels;
  with_inf.push_back({"le", "+Inf"});
  w.Sample(family, with_inf, static_cast<double>(count), "_bucket");
  w.Sample(family, labels, sum, "_sum");
  w.Sample(family, labels, static_cast<double>(count), "_count");
}

}  // namespace

std::string Metrics::Render() const {
  std::string out;
  MetricWriter w(&out);
  std::vector<Collector> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, s] : calls_) {
      w.Sample("walserver_rpc_calls_total", {{"method", key.first}, {"code", CodeName(key.second)}},
               static_cast<double>(s.count));
    }
    for (const auto& [key, s] : calls_) {
      WriteHistogram(
          w, "walserver_rpc_latency_seconds",
          {{"method", key.first}, {"code", CodeName(key.second)}},
          [&s = s](size_t i) { return s.buckets[i]; }, s.count, s.sum);
    }
    collectors = collectors_;
  }
  for (int stage = 0; stage < kAppendStages; ++stage) {
    const StageStats& s = stages_[stage];
    WriteHistogram(
        w, "walserver_append_stage_seconds",
        {{"stage", AppendStageName(static_cast<AppendStage>(stage))}},
        [&s](size_t i) { return s.buckets[i].load(std::memory_order_relaxed); },
        s.count.load(std::memory_order_relaxed), s.sum_ns.load(std::memory_order_relaxed) / 1e9);
  }
  RenderCounters(w);
  for (const Collector& c : collectors) c(w);
  return out;
}

void Metrics::RenderCounters(MetricWriter& w) const {
  w.Sample("walserver_append_bytes_total", {}, static_cast<double>(append_bytes.load()));
  w.Sample("walserver_append_entries_total", {}, static_cast<double>(append_entries.load()));
  w.Sample("walserver_read_bytes_total", {}, static_cast<double>(read_bytes.load()));
  w.Sample("walserver_read_scanned_bytes_total", {},
           static_cast<double>(read_scanned_bytes.load()));
  w.Sample("walserver_read_entries_total", {}, static_cast<double>(read_entries.load()));
  w.Sample("walserver_read_fenced_entries_total", {},
           static_cast<double>(read_fenced_entries.load()));
  w.Sample("walserver_read_duplicate_entries_total", {},
           static_cast<double>(read_duplicate_entries.load()));
  w.Sample("walserver_read_scans_total", {}, static_cast<double>(read_scans.load()));
  w.Sample("walserver_read_scan_rewinds_total", {}, static_cast<double>(read_scan_rewinds.load()));
  w.Sample("walserver_read_scan_detaches_total", {},
           static_cast<double>(read_scan_detaches.load()));
  w.Sample("walserver_read_index_skips_total", {}, static_cast<double>(read_index_skips.load()));
  w.Sample("walserver_read_fetch_size_changes_total", {},
           static_cast<double>(read_fetch_size_changes.load()));
  w.Sample("walserver_read_index_drops_total", {}, static_cast<double>(read_index_drops.load()));
  w.Sample("walserver_read_index_saves_total", {}, static_cast<double>(read_index_saves.load()));
  w.Sample("walserver_read_index_restores_total", {},
           static_cast<double>(read_index_restores.load()));
  w.Sample("walserver_read_torn_entries_total", {}, static_cast<double>(read_torn_entries.load()));
  w.Sample("walserver_read_gaps_total", {}, static_cast<double>(read_gaps.load()));
  w.Sample("walserver_appends_fenced_total", {}, static_cast<double>(appends_fenced.load()));
  w.Sample("walserver_append_checksum_mismatches_total", {},
           static_cast<double>(append_checksum_mismatches.load()));
  w.Sample("walserver_append_retries_looked_up_total", {},
           static_cast<double>(append_retries_looked_up.load()));
  w.Sample("walserver_append_retried_entries_found_total", {},
           static_cast<double>(append_retried_entries_found.load()));
  w.Sample("walserver_stale_leader_drops_total", {},
           static_cast<double>(stale_leader_drops.load()));
  w.Sample("walserver_pruned_records_total", {}, static_cast<double>(pruned_records.load()));
  w.Sample("walserver_prune_refusals_total", {}, static_cast<double>(prune_refusals.load()));
  w.Sample("walserver_prune_logical", {}, static_cast<double>(prune_logical.load()));
  w.Sample("walserver_appends_in_flight", {}, static_cast<double>(appends_in_flight.load()));
  w.Sample("walserver_reads_in_progress", {}, static_cast<double>(reads_in_progress.load()));
}

grpc::experimental::Interceptor* MetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new MetricsInterceptor(info, metrics_);
}

void WriteKafkaStats(const std::string& client, const std::string& stats_json, MetricWriter& w) {
  if (stats_json.empty()) return;
  // Not protobuf's Struct: its map fields change layout in ThreadSanitizer builds, which then
  // crash inside the uninstrumented libprotobuf.
  const nlohmann::json stats =
      nlohmann::json::parse(stats_json, nullptr, /*allow_exceptions=*/false);
  if (!stats.is_object()) return;
  auto number = [](const nlohmann::json& object, const char* key) {
    auto it = object.find(key);
    return it != object.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  auto text = [](const nlohmann::json& object, const char* key) {
    auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  w.Sample("walserver_kafka_tx_bytes_total", {{"client", client}}, number(stats, "tx_bytes"));
  w.Sample("walserver_kafka_rx_bytes_total", {{"client", client}}, number(stats, "rx_bytes"));
  w.Sample("walserver_kafka_tx_messages_total", {{"client", client}}, number(stats, "txmsgs"));
  w.Sample("walserver_kafka_tx_requests_total", {{"client", client}}, number(stats, "tx"));
  auto brokers = stats.find("brokers");
  if (brokers == stats.end() || !brokers->is_object()) return;
  for (const auto& [name, broker] : brokers->items()) {
    if (!broker.is_object()) continue;
    // Only the configured and learned brokers; the internal pseudo-broker is not a connection.
    if (text(broker, "source") == "internal") continue;
    w.Sample("walserver_kafka_broker_up", {{"client", client}, {"broker", name}},
             text(broker, "state") == "UP" ? 1 : 0);
  }
}

}  // namespace wal
