#include "server/wal_core.h"

#include <algorithm>
#include <future>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/common/namespace_key.h"
#include "server/kafka/admin.h"
#include "spdlog/spdlog.h"

namespace wal {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Our settings for one client, then the operator's --kafka.* on top: they win.
KafkaProperties WithUserProperties(KafkaProperties properties, const ServerOptions& o) {
  for (const auto& [key, value] : o.kafka_properties) properties[key] = value;
  return properties;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WalCore>> WalCore::Start(const ServerOptions& o,
                                                        ReaderOptions reader_tuning) {
  std::unique_ptr<WalCore> self(new WalCore());
  // In the order they depend on each other; the destructor tears down in reverse.
  for (auto step : {&WalCore::ConnectKafka, &WalCore::PrepareTopics, &WalCore::OpenNamespaceTable,
                    &WalCore::StartWriter, &WalCore::BeginEmptySlots}) {
    if (absl::Status s = (self.get()->*step)(o); !s.ok()) return s;
  }
  self->StartReader(o, std::move(reader_tuning));
  if (absl::Status s = self->StartIndexStore(o); !s.ok()) return s;
  return self;
}

WalCore::~WalCore() { Close(); }

void WalCore::Close() {
  index_store_.reset();  // after its last save (begun by StopReads, or now)
  reader_.reset();
  // Lookups still running hand what they did not find to the writer: they end first. Their
  // claims go with the writer's callbacks, so the claims' table outlives the writer.
  if (retried_) retried_->Close();
  stale_leaders_.reset();  // it asks the writer
  writer_.reset();
  retried_.reset();
  meta_.reset();
  admin_.reset();
  mock_.reset();
}

void WalCore::StopReads() {
  if (reader_) reader_->Stop();
  // Its last save runs while the calls finish, not after.
  if (index_store_) index_store_->Stop();
}

void WalCore::FailPending() {
  // Lookups first: the claims the writer releases now would wake them into new scans.
  if (retried_) retried_->Stop();
  if (writer_) writer_->FailPending();
  if (meta_) meta_->FailPending();
}

absl::Status WalCore::ConnectKafka(const ServerOptions& o) {
  SetKafkaRtoMax(o.kafka_rto_max);  // before the first client
  std::string brokers = o.brokers;
  if (brokers.empty()) {
    auto cluster = MockCluster::Create(1);
    if (!cluster.ok()) return cluster.status();
    mock_ = std::move(*cluster);
    brokers = mock_->bootstrap_servers();
    spdlog::warn("************************************************************************");
    spdlog::warn("* No --brokers given: running on an IN-PROCESS MOCK Kafka cluster.     *");
    spdlog::warn("* All data lives in memory only and is LOST when walserver stops; the  *");
    spdlog::warn("* mock keeps only about 5 MiB per partition. For trying the service,   *");
    spdlog::warn("* never for real data. Pass --brokers=HOST:PORT to use real Kafka.     *");
    spdlog::warn("************************************************************************");
  }
  max_entry_bytes_ = o.max_entry_bytes != 0 ? o.max_entry_bytes : (mock_ ? 4 * kMiB : 64 * kMiB);
  // A Kafka batch must hold one whole record with room to spare.
  kafka_batch_bytes_ = std::to_string(o.max_record_bytes + 64 * 1024);
  // Nagle off: a produce or fetch request is sent whole at once, and with Nagle on a small one
  // could wait for the broker's delayed acknowledgement of the previous one
  // (docs/benchmarks/2026-12-02-walpeer.md).
  kafka_ = WithUserProperties({{"bootstrap.servers", brokers},
                               {"reconnect.backoff.max.ms", "1000"},
                               {"socket.nagle.disable", "true"},
                               {"message.max.bytes", kafka_batch_bytes_}},
                              o);
  auto admin = NewKafkaClient(RD_KAFKA_PRODUCER, kafka_);
  if (!admin.ok()) return admin.status();
  admin_ = std::move(*admin);
  if (mock_) return absl::OkStatus();
  // Reaching Kafka is the first thing that fails on a wrong address, a broker that is down or a
  // listener that wants TLS or SASL: say so here rather than as a timed-out topic request.
  auto brokers_up = CountLiveBrokers(admin_.get(), Clock::now() + o.startup_timeout);
  if (!brokers_up.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "no Kafka broker at --brokers=", brokers, " answered within --startup_timeout_ms=",
        o.startup_timeout.count(), " (", brokers_up.status().message(),
        "; librdkafka's log above says why). Check that Kafka runs there and that this host can "
        "reach the address each broker advertises; a TLS or SASL listener also needs "
        "--kafka.security.protocol and the matching --kafka.ssl.* or --kafka.sasl.* settings"));
  }
  live_brokers_ = *brokers_up;
  return absl::OkStatus();
}

std::vector<TopicSpec> WalCore::TopicSpecs(const ServerOptions& o) const {
  std::vector<TopicSpec> topics;
  const std::string min_isr = std::to_string(o.min_insync_replicas);
  for (int t = 0; t < o.topic_count; ++t) {
    TopicSpec spec{absl::StrCat(o.topic_prefix, "_", t),
                   o.partitions_per_topic,
                   o.replication_factor,
                   {{"cleanup.policy", "delete"},
                    {"retention.ms", "-1"},
                    {"retention.bytes", "-1"},
                    {"max.message.bytes", kafka_batch_bytes_},
                    {"min.insync.replicas", min_isr},
                    // Reads from a time rely on each record's time being walserver's, taken
                    // after the entry was encoded (log/entry_reader.cc), not the broker's.
                    {"message.timestamp.type", "CreateTime"}}};
    topics.push_back(std::move(spec));
  }
  if (KeepsIndexes(o)) {
    // Each slot's index (log/slot_index_store.h): one record per slot, the last one counts.
    topics.push_back(TopicSpec{o.topic_prefix + "_index",
                               1,
                               o.replication_factor,
                               {{"cleanup.policy", "compact"},
                                // A walserver that starts reads the whole topic: segments small
                                // enough that compaction keeps about one index per slot.
                                {"segment.bytes", std::to_string(16 << 20)},
                                {"max.message.bytes", kafka_batch_bytes_},
                                {"min.insync.replicas", min_isr}}});
  }
  topics.push_back(TopicSpec{o.topic_prefix + "_meta",
                             1,
                             o.replication_factor,
                             {{"cleanup.policy", "compact"},
                              // Time to restate a namespace after a lost creation race before
                              // compaction may drop the winner's record.
                              {"min.compaction.lag.ms", "3600000"},
                              {"min.insync.replicas", min_isr}}});
  return topics;
}

absl::Status WalCore::PrepareTopics(const ServerOptions& o) {
  const std::vector<TopicSpec> topics = TopicSpecs(o);
  for (int t = 0; t < o.topic_count; ++t) {  // the data topics come first
    for (int p = 0; p < topics[t].partitions; ++p) slots_.push_back(Slot{topics[t].name, p});
  }
  if (mock_) {
    // The mock cluster has no CreateTopics or DescribeConfigs.
    for (const TopicSpec& spec : topics) {
      if (absl::Status s = mock_->CreateTopic(spec.name, spec.partitions); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  const absl::Status status = EnsureTopics(admin_.get(), topics, Clock::now() + o.startup_timeout);
  return status.ok() ? status : ExplainTopicsFailure(o, status);
}

absl::Status WalCore::ExplainTopicsFailure(const ServerOptions& o,
                                           const absl::Status& status) const {
  const std::string names =
      absl::StrCat(o.topic_prefix, "_0..", o.topic_count - 1, ", ",
                   KeepsIndexes(o) ? o.topic_prefix + "_index, " : "", o.topic_prefix, "_meta");
  // Kafka's refusal to create a topic with more replicas than brokers, or an existing topic
  // with fewer replicas than asked (both worded in kafka/admin.cc). Other failures, e.g. no
  // leader while a broker is down, keep their own message and code.
  const bool too_few_replicas =
      absl::StrContains(status.message(), "INVALID_REPLICATION_FACTOR") ||
      absl::StrContains(status.message(), "exists with replication factor");
  if (too_few_replicas && live_brokers_ < o.replication_factor) {
    // A single development broker with the default replication: the most common first failure.
    return absl::FailedPreconditionError(absl::StrCat(
        "Kafka at ", kafka_.at("bootstrap.servers"), " has ", live_brokers_,
        " live broker(s), fewer than --replication_factor=", o.replication_factor, ", so topics ",
        names, " cannot be created or used (", status.message(),
        "). For a single-broker Kafka start walserver with --replication_factor=1 "
        "--min_insync_replicas=1 (one copy of each entry: for trying walserver, not for data "
        "you cannot lose); otherwise start the missing brokers"));
  }
  if (absl::StrContains(status.message(), kFewerThanMinInsync)) {
    return absl::FailedPreconditionError(absl::StrCat(
        status.message(),
        ". With --replication_factor=-1 the brokers' default replication decides, and the "
        "topics now exist with that min.insync.replicas: delete them or choose another "
        "--topic_prefix, then set --min_insync_replicas to at most the replicas each topic "
        "gets, or give --replication_factor"));
  }
  if (absl::StrContains(status.message(), kFewerThanOwnMinInsync)) {
    return absl::FailedPreconditionError(absl::StrCat(
        status.message(),
        ". Lower the topic's min.insync.replicas (kafka-configs.sh --alter --entity-type "
        "topics --add-config min.insync.replicas=N), give it more replicas, or choose another "
        "--topic_prefix"));
  }
  if (absl::IsFailedPrecondition(status)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "topics ", names, " exist with other settings: ", status.message(),
        ". Start walserver with the --topic_count, --partitions_per_topic, "
        "--replication_factor, --min_insync_replicas and --max_record_bytes they were created "
        "with, or choose another --topic_prefix"));
  }
  return absl::Status(status.code(),
                      absl::StrCat("preparing topics ", names, " on Kafka at ",
                                   kafka_.at("bootstrap.servers"), ": ", status.message(),
                                   ". Check the brokers' logs, or raise --startup_timeout_ms"));
}

absl::Status WalCore::OpenNamespaceTable(const ServerOptions& o) {
  auto meta =
      MetaStore::Open(kafka_, slots_, {o.topic_prefix + "_meta", o.name, o.startup_timeout});
  if (!meta.ok()) {
    return absl::Status(meta.status().code(),
                        absl::StrCat(meta.status().message(),
                                     ". Check that its partition has a leader (the brokers' "
                                     "logs), or raise --startup_timeout_ms"));
  }
  meta_ = std::move(*meta);
  return absl::OkStatus();
}

absl::Status WalCore::StartWriter(const ServerOptions& o) {
  WriterOptions writer_options;
  writer_options.producers = o.producers;
  writer_options.slot_flushes_in_flight = o.slot_flushes_in_flight;
  writer_options.packed_records = o.packed_records;
  writer_options.max_record_bytes = o.max_record_bytes;
  writer_options.append_timeout = o.append_timeout;
  for (int t = 0; t < o.topic_count; ++t) {
    writer_options.topics.push_back(absl::StrCat(o.topic_prefix, "_", t));
  }
  writer_kafka_ = kafka_;
  // No linger: records produced while a request is in flight still go out together in the
  // next one, and a caller alone does not wait 1 ms for company
  // (docs/benchmarks/2026-12-02-walpeer.md: with Nagle off, +50% batched appends).
  writer_kafka_["linger.ms"] = "0";
  // Feeds the broker and traffic metrics.
  writer_kafka_["statistics.interval.ms"] = "5000";
  // Batches are compressed by the producer and kept so by the brokers (the topics' default
  // compression.type=producer); readers decompress.
  writer_kafka_["compression.type"] = o.compression;
  writer_kafka_ = WithUserProperties(writer_kafka_, o);
  // Bounds how long records wait for an unreachable Kafka; the call fails at append_timeout.
  // Not overridable: readers rely on no record landing later than append_timeout after it was
  // encoded (see the torn-entry rules in log/entry_assembler.h).
  writer_kafka_["message.timeout.ms"] = std::to_string(o.append_timeout.count());
  auto writer = EntryWriter::Create(writer_kafka_, writer_options, o.name);
  if (!writer.ok()) return writer.status();
  writer_ = std::move(*writer);
  StaleLeaderWatchOptions watch;
  watch.kafka = kafka_;
  // A record reported within a second is the rule: a produce round trip takes milliseconds.
  watch.stalled_slots = [writer = writer_.get()] {
    return writer->StalledSlots(std::chrono::seconds(1));
  };
  watch.on_drop = [metrics = &metrics_] { ++metrics->stale_leader_drops; };
  watch.name = o.name;
  stale_leaders_ = std::make_unique<StaleLeaderWatch>(std::move(watch));
  return absl::OkStatus();
}

absl::Status WalCore::BeginEmptySlots(const ServerOptions& o) {
  const Clock::time_point deadline = Clock::now() + o.startup_timeout;
  std::vector<AppendItem> starts;
  for (const Slot& slot : slots_) {
    absl::StatusOr<Watermarks> marks = QueryWatermarks(meta_->watermarks_client(), slot, deadline);
    if (!marks.ok()) return marks.status();
    if (marks->high != 0) continue;
    AppendItem start;
    start.slot = slot;
    start.namespace_id = kNoNamespace;
    start.fence = true;
    starts.push_back(std::move(start));
  }
  if (starts.empty()) return absl::OkStatus();
  auto written = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> done = written->get_future();
  writer_->Append(
      std::move(starts), deadline,
      [written](absl::StatusOr<std::vector<uint64_t>> ids) { written->set_value(ids.status()); });
  // Not a reason to refuse to start: the slots that took it are fine, and the others are no
  // worse than before; a datanode may then skip a new region's first entry there.
  if (absl::Status s = done.get(); !s.ok()) {
    spdlog::warn("writing the record that begins each empty slot: {}", s.ToString());
  }
  return absl::OkStatus();
}

void WalCore::StartReader(const ServerOptions& o, ReaderOptions reader_options) {
  reader_options.max_concurrent_reads = static_cast<size_t>(o.max_concurrent_reads);
  if (!reader_options.acknowledged_end) {  // a test may stand in for the writer
    reader_options.acknowledged_end = [writer = writer_.get()](const Slot& slot) {
      return writer->AcknowledgedEnd(slot);
    };
  }
  reader_options.slot_index = o.read_index;
  reader_options.max_entry_bytes = max_entry_bytes_;
  reader_options.offsets_for_times = mock_ == nullptr;  // the mock cannot look up a time
  reader_options.topic_ids = mock_ == nullptr;          // nor describe a topic
  reader_kafka_ = kafka_;
  reader_kafka_.erase("message.max.bytes");
  // The data topics hold batches as the writer's producers pack them; a larger batch still
  // comes whole (Kafka answers at least one batch per fetch).
  reader_kafka_["fetch.message.max.bytes"] = std::to_string(ReaderFetchBytes(writer_kafka_));
  reader_kafka_ = WithUserProperties(reader_kafka_, o);
  reader_ =
      std::make_unique<EntryReader>(reader_kafka_, reader_options, meta_.get(), &metrics_, o.name);
  StartRetriedEntries(o, reader_options.acknowledged_end);
}

void WalCore::StartRetriedEntries(const ServerOptions& o,
                                  std::function<int64_t(const Slot&)> acknowledged_end) {
  RetriedEntriesOptions retried;
  retried.consumer = reader_kafka_;  // they read what the reader reads
  retried.admin = admin_.get();
  retried.offsets_for_times = mock_ == nullptr;
  retried.acknowledged_end = std::move(acknowledged_end);
  retried.namespace_start = [meta = meta_.get()](uint64_t namespace_id) -> int64_t {
    const std::optional<NamespaceState> state = meta->Get(namespace_id);
    return state ? state->start_offset : 0;
  };
  retried.name = o.name;
  retried_ = std::make_unique<RetriedEntries>(std::move(retried));
}

bool WalCore::KeepsIndexes(const ServerOptions& o) const {
  // The mock cluster has no topic ids, which a saved index needs (its reads do not check them:
  // ReaderOptions::topic_ids), and keeps nothing past the process anyway.
  return !mock_ && o.read_index && o.read_index_save_interval.count() > 0;
}

absl::Status WalCore::StartIndexStore(const ServerOptions& o) {
  if (!KeepsIndexes(o)) return absl::OkStatus();
  SlotIndexStoreOptions options;
  options.topic = o.topic_prefix + "_index";
  options.name = o.name;
  options.slots = slots_;
  options.save_interval = o.read_index_save_interval;
  options.max_snapshot_bytes = o.max_record_bytes;
  options.load_timeout = std::min(options.load_timeout, o.startup_timeout);
  auto store =
      SlotIndexStore::Start(kafka_, &reader_->slot_indexes(), &metrics_, std::move(options));
  if (!store.ok()) return store.status();
  index_store_ = std::move(*store);
  return absl::OkStatus();
}

}  // namespace wal
