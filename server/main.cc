// walserver: a write-ahead-log service on Kafka. This file only wires the parts together, top to
// bottom: options, Kafka, namespace table, service, server, wait for a signal, shut down.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "server/entry_reader.h"
#include "server/entry_writer.h"
#include "server/kafka.h"
#include "server/meta_store.h"
#include "server/wal_service.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC listen address, HOST:PORT");
ABSL_FLAG(std::string, brokers, "",
          "Kafka bootstrap servers, HOST:PORT[,...]. Empty: an in-process mock cluster that keeps "
          "data in memory only, for trying the service");
ABSL_FLAG(std::string, topic_prefix, "wal",
          "Topics are <prefix>_0 .. <prefix>_<topic_count-1> for data and <prefix>_meta");
ABSL_FLAG(int, topic_count, 4, "Number of data topics");
ABSL_FLAG(int, partitions_per_topic, 4, "Partitions per data topic; each partition is a slot");
ABSL_FLAG(int, replication_factor, 3, "Replication factor of topics walserver creates");
ABSL_FLAG(int, min_insync_replicas, 2, "min.insync.replicas of topics walserver creates");
ABSL_FLAG(uint64_t, max_entry_bytes, 0,
          "Largest entry accepted; 0 means 64 MiB (4 MiB on the in-process mock cluster, which "
          "keeps only about 5 MiB per partition)");
ABSL_FLAG(uint64_t, max_record_bytes, 1000000,
          "Largest Kafka record value; larger entries are split into several records");
ABSL_FLAG(int, producers, 2, "Kafka producers in the pool; each owns a share of the slots");
ABSL_FLAG(int, append_timeout_ms, 30000,
          "An append not acknowledged by Kafka in this time fails with UNAVAILABLE");
ABSL_FLAG(int, admin_timeout_ms, 10000,
          "Bound on Kafka round trips of CreateNamespace, Truncate and the other admin calls");
ABSL_FLAG(int, max_concurrent_reads, 64, "Read streams beyond this get RESOURCE_EXHAUSTED");
ABSL_FLAG(int, startup_timeout_ms, 60000, "How long start-up waits for Kafka");
ABSL_FLAG(std::string, kafka_properties, "",
          "Extra librdkafka properties for every client, KEY=VALUE[,KEY=VALUE...] (security "
          "settings, for example)");
ABSL_FLAG(std::string, name, "", "Name of this server in Kafka client ids; default host-pid");
ABSL_FLAG(std::string, ready_file, "",
          "Once serving, write the listen address (with the real port) to this file");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn or error");

namespace {

constexpr uint64_t kMiB = 1 << 20;

int Fail(const absl::Status& status, const char* what) {
  spdlog::critical("{}: {}", what, status.ToString());
  return 1;
}

std::string DefaultName() {
  char host[256] = "walserver";
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "-", getpid());
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "A write-ahead-log service on Kafka.\n"
      "Usage: walserver --listen=HOST:PORT --brokers=HOST:PORT[,...] [options]");
  absl::ParseCommandLine(argc, argv);
  // Signals are taken by sigwait() below; block them before any thread starts so none gets them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));

  // ---- Options ----
  const std::string name =
      absl::GetFlag(FLAGS_name).empty() ? DefaultName() : absl::GetFlag(FLAGS_name);
  const std::string prefix = absl::GetFlag(FLAGS_topic_prefix);
  std::string brokers = absl::GetFlag(FLAGS_brokers);
  const bool embedded = brokers.empty();
  uint64_t max_entry_bytes = absl::GetFlag(FLAGS_max_entry_bytes);
  if (max_entry_bytes == 0) max_entry_bytes = embedded ? 4 * kMiB : 64 * kMiB;
  const uint64_t max_record_bytes = absl::GetFlag(FLAGS_max_record_bytes);
  if (max_record_bytes < 1024 || max_record_bytes > 64 * kMiB) {
    spdlog::critical("--max_record_bytes must be between 1024 and 64 MiB");
    return 2;
  }
  if (absl::GetFlag(FLAGS_topic_count) < 1 || absl::GetFlag(FLAGS_partitions_per_topic) < 1) {
    spdlog::critical("--topic_count and --partitions_per_topic must be at least 1");
    return 2;
  }
  // A Kafka batch must hold one whole record with room to spare.
  const std::string kafka_batch_bytes = std::to_string(max_record_bytes + 64 * 1024);

  // ---- Kafka ----
  std::unique_ptr<wal::MockCluster> mock;
  if (embedded) {
    auto cluster = wal::MockCluster::Create(1);
    if (!cluster.ok()) return Fail(cluster.status(), "starting the embedded Kafka mock cluster");
    mock = std::move(*cluster);
    brokers = mock->bootstrap_servers();
    spdlog::warn("************************************************************************");
    spdlog::warn("* No --brokers given: running on an IN-PROCESS MOCK Kafka cluster.     *");
    spdlog::warn("* All data lives in memory only and is LOST when walserver stops; the  *");
    spdlog::warn("* mock keeps only about 5 MiB per partition. For trying the service,   *");
    spdlog::warn("* never for real data. Pass --brokers=HOST:PORT to use real Kafka.     *");
    spdlog::warn("************************************************************************");
  }
  wal::KafkaProperties kafka{{"bootstrap.servers", brokers},
                             {"reconnect.backoff.max.ms", "1000"},
                             {"message.max.bytes", kafka_batch_bytes}};
  for (absl::string_view kv : absl::StrSplit(absl::GetFlag(FLAGS_kafka_properties), ',',
                                            absl::SkipWhitespace())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first.empty() || p.second.empty()) {
      spdlog::critical("--kafka_properties: '{}' is not KEY=VALUE", std::string(kv));
      return 2;
    }
    kafka[p.first] = p.second;
  }

  std::vector<wal::Slot> slots;
  std::vector<wal::TopicSpec> topics;
  const std::map<std::string, std::string> data_configs{
      {"cleanup.policy", "delete"},
      {"retention.ms", "-1"},
      {"retention.bytes", "-1"},
      {"max.message.bytes", kafka_batch_bytes},
      {"min.insync.replicas", std::to_string(absl::GetFlag(FLAGS_min_insync_replicas))}};
  for (int t = 0; t < absl::GetFlag(FLAGS_topic_count); ++t) {
    wal::TopicSpec spec{absl::StrCat(prefix, "_", t), absl::GetFlag(FLAGS_partitions_per_topic),
                        absl::GetFlag(FLAGS_replication_factor), data_configs};
    for (int p = 0; p < spec.partitions; ++p) slots.push_back(wal::Slot{spec.name, p});
    topics.push_back(std::move(spec));
  }
  const std::string meta_topic = prefix + "_meta";
  topics.push_back(wal::TopicSpec{
      meta_topic,
      1,
      absl::GetFlag(FLAGS_replication_factor),
      {{"cleanup.policy", "compact"},
       // Leaves time to restate a namespace after a lost creation race before compaction runs.
       {"min.compaction.lag.ms", "3600000"},
       {"min.insync.replicas", std::to_string(absl::GetFlag(FLAGS_min_insync_replicas))}}});

  auto admin = wal::NewKafkaClient(RD_KAFKA_PRODUCER, kafka);
  if (!admin.ok()) return Fail(admin.status(), "creating the Kafka admin client");
  const int startup_timeout_ms = absl::GetFlag(FLAGS_startup_timeout_ms);
  if (embedded) {
    for (const wal::TopicSpec& spec : topics) {
      if (absl::Status s = mock->CreateTopic(spec.name, spec.partitions); !s.ok()) {
        return Fail(s, "creating mock topics");
      }
    }
  } else if (absl::Status s = wal::EnsureTopics(admin->get(), topics, startup_timeout_ms);
             !s.ok()) {
    return Fail(s, "preparing the Kafka topics");
  }

  // ---- Namespace table ----
  auto meta = wal::MetaStore::Open(kafka, slots, {meta_topic, name, startup_timeout_ms});
  if (!meta.ok()) return Fail(meta.status(), "loading the namespace table");

  // ---- Writers and readers ----
  wal::WriterOptions writer_options;
  writer_options.producers = absl::GetFlag(FLAGS_producers);
  writer_options.max_record_bytes = max_record_bytes;
  writer_options.append_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_append_timeout_ms));
  wal::KafkaProperties writer_kafka = kafka;
  writer_kafka["linger.ms"] = "1";
  writer_kafka["message.timeout.ms"] = std::to_string(absl::GetFlag(FLAGS_append_timeout_ms));
  auto writer = wal::EntryWriter::Create(writer_kafka, writer_options, name);
  if (!writer.ok()) return Fail(writer.status(), "creating the Kafka producers");

  wal::ReaderOptions reader_options;
  reader_options.max_concurrent_reads = absl::GetFlag(FLAGS_max_concurrent_reads);
  reader_options.max_entry_bytes = max_entry_bytes;
  wal::KafkaProperties reader_kafka = kafka;
  reader_kafka.erase("message.max.bytes");
  reader_kafka["fetch.message.max.bytes"] = kafka_batch_bytes;
  auto reader = std::make_unique<wal::EntryReader>(reader_kafka, reader_options, meta->get(), name);

  // ---- gRPC server ----
  wal::ServiceOptions service_options;
  service_options.max_entry_bytes = max_entry_bytes;
  service_options.admin_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_admin_timeout_ms));
  wal::WalServiceImpl service(service_options, meta->get(), writer->get(), reader.get(),
                              admin->get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  // One request may carry a largest entry plus room for its envelope; a reply batch likewise.
  const int message_limit = static_cast<int>(std::min<uint64_t>(max_entry_bytes + 4 * kMiB, INT32_MAX));
  builder.SetMaxReceiveMessageSize(message_limit);
  builder.SetMaxSendMessageSize(message_limit);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::critical("cannot listen on {}", absl::GetFlag(FLAGS_listen));
    return 1;
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const std::string address = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  spdlog::info("walserver {} listening on {} (Kafka {}, slots {}x{}, max entry {} bytes)", name,
               address, embedded ? "in-process mock" : brokers, absl::GetFlag(FLAGS_topic_count),
               absl::GetFlag(FLAGS_partitions_per_topic), max_entry_bytes);
  if (!absl::GetFlag(FLAGS_ready_file).empty()) {
    const std::string tmp = absl::GetFlag(FLAGS_ready_file) + ".tmp";
    std::ofstream(tmp) << address << "\n";
    std::rename(tmp.c_str(), absl::GetFlag(FLAGS_ready_file).c_str());
  }

  // ---- Wait for a signal, then shut down in reverse ----
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {}: shutting down", signal_number);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  reader.reset();
  writer->reset();
  meta->reset();
  spdlog::info("walserver stopped");
  return 0;
}
