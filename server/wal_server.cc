#include "server/wal_server.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace wal {
namespace {

constexpr uint64_t kMiB = 1 << 20;

absl::Status Validate(const ServerOptions& o) {
  if (o.topic_count < 1 || o.partitions_per_topic < 1) {
    return absl::InvalidArgumentError("topic_count and partitions_per_topic must be at least 1");
  }
  if (o.topic_prefix.empty()) return absl::InvalidArgumentError("topic_prefix must not be empty");
  if (o.max_record_bytes < 1024 || o.max_record_bytes > 64 * kMiB) {
    return absl::InvalidArgumentError("max_record_bytes must be between 1024 and 64 MiB");
  }
  if (o.max_entry_bytes > 1024 * kMiB) {
    return absl::InvalidArgumentError("max_entry_bytes must be at most 1 GiB");
  }
  if (o.producers < 1 || o.max_concurrent_reads < 1) {
    return absl::InvalidArgumentError("producers and max_concurrent_reads must be at least 1");
  }
  if (o.append_timeout.count() < 100 || o.admin_timeout.count() < 100) {
    return absl::InvalidArgumentError("append_timeout and admin_timeout must be at least 100 ms");
  }
  return absl::OkStatus();
}

std::string DefaultName() {
  char host[256] = "walserver";
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "-", getpid());
}

}  // namespace

absl::StatusOr<std::unique_ptr<WalServer>> WalServer::Start(ServerOptions o) {
  if (absl::Status s = Validate(o); !s.ok()) return s;
  std::unique_ptr<WalServer> self(new WalServer());
  if (o.name.empty()) o.name = DefaultName();

  // ---- Kafka ----
  std::string brokers = o.brokers;
  if (brokers.empty()) {
    auto cluster = MockCluster::Create(1);
    if (!cluster.ok()) return cluster.status();
    self->mock_ = std::move(*cluster);
    brokers = self->mock_->bootstrap_servers();
    spdlog::warn("************************************************************************");
    spdlog::warn("* No --brokers given: running on an IN-PROCESS MOCK Kafka cluster.     *");
    spdlog::warn("* All data lives in memory only and is LOST when walserver stops; the  *");
    spdlog::warn("* mock keeps only about 5 MiB per partition. For trying the service,   *");
    spdlog::warn("* never for real data. Pass --brokers=HOST:PORT to use real Kafka.     *");
    spdlog::warn("************************************************************************");
  }
  self->max_entry_bytes_ =
      o.max_entry_bytes != 0 ? o.max_entry_bytes : (self->mock_ ? 4 * kMiB : 64 * kMiB);
  // A Kafka batch must hold one whole record with room to spare.
  const std::string kafka_batch_bytes = std::to_string(o.max_record_bytes + 64 * 1024);
  KafkaProperties kafka{{"bootstrap.servers", brokers},
                        {"reconnect.backoff.max.ms", "1000"},
                        {"message.max.bytes", kafka_batch_bytes}};
  for (const auto& [key, value] : o.kafka_properties) kafka[key] = value;

  // ---- Topics ----
  std::vector<Slot> slots;
  std::vector<TopicSpec> topics;
  const std::string min_isr = std::to_string(o.min_insync_replicas);
  for (int t = 0; t < o.topic_count; ++t) {
    TopicSpec spec{absl::StrCat(o.topic_prefix, "_", t),
                   o.partitions_per_topic,
                   o.replication_factor,
                   {{"cleanup.policy", "delete"},
                    {"retention.ms", "-1"},
                    {"retention.bytes", "-1"},
                    {"max.message.bytes", kafka_batch_bytes},
                    {"min.insync.replicas", min_isr}}};
    for (int p = 0; p < spec.partitions; ++p) slots.push_back(Slot{spec.name, p});
    topics.push_back(std::move(spec));
  }
  const std::string meta_topic = o.topic_prefix + "_meta";
  topics.push_back(TopicSpec{meta_topic,
                             1,
                             o.replication_factor,
                             {{"cleanup.policy", "compact"},
                              // Time to restate a namespace after a lost creation race before
                              // compaction may drop the winner's record.
                              {"min.compaction.lag.ms", "3600000"},
                              {"min.insync.replicas", min_isr}}});
  auto admin = NewKafkaClient(RD_KAFKA_PRODUCER, kafka);
  if (!admin.ok()) return admin.status();
  self->admin_ = std::move(*admin);
  if (self->mock_) {
    // The mock cluster has no CreateTopics or DescribeConfigs.
    for (const TopicSpec& spec : topics) {
      if (absl::Status s = self->mock_->CreateTopic(spec.name, spec.partitions); !s.ok()) return s;
    }
  } else if (absl::Status s = EnsureTopics(self->admin_.get(), topics,
                                           static_cast<int>(o.startup_timeout.count()));
             !s.ok()) {
    return s;
  }

  // ---- Namespace table ----
  auto meta = MetaStore::Open(kafka, slots,
                              {meta_topic, o.name, static_cast<int>(o.startup_timeout.count())});
  if (!meta.ok()) return meta.status();
  self->meta_ = std::move(*meta);

  // ---- Writer and reader ----
  WriterOptions writer_options;
  writer_options.producers = o.producers;
  writer_options.max_record_bytes = o.max_record_bytes;
  writer_options.append_timeout = o.append_timeout;
  KafkaProperties writer_kafka = kafka;
  writer_kafka["linger.ms"] = "1";
  // Bounds how long records wait for an unreachable Kafka; the call fails at append_timeout.
  writer_kafka["message.timeout.ms"] = std::to_string(o.append_timeout.count());
  auto writer = EntryWriter::Create(writer_kafka, writer_options, o.name);
  if (!writer.ok()) return writer.status();
  self->writer_ = std::move(*writer);

  ReaderOptions reader_options;
  reader_options.max_concurrent_reads = static_cast<size_t>(o.max_concurrent_reads);
  reader_options.max_entry_bytes = self->max_entry_bytes_;
  KafkaProperties reader_kafka = kafka;
  reader_kafka.erase("message.max.bytes");
  reader_kafka["fetch.message.max.bytes"] = kafka_batch_bytes;
  self->reader_ =
      std::make_unique<EntryReader>(reader_kafka, reader_options, self->meta_.get(), o.name);

  // ---- gRPC ----
  ServiceOptions service_options;
  service_options.max_entry_bytes = self->max_entry_bytes_;
  service_options.admin_timeout = o.admin_timeout;
  self->service_ =
      std::make_unique<WalServiceImpl>(service_options, self->meta_.get(), self->writer_.get(),
                                       self->reader_.get(), self->admin_.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(o.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(self->service_.get());
  // A request may carry one largest entry plus its envelope; a reply batch likewise.
  const int message_limit =
      static_cast<int>(std::min<uint64_t>(self->max_entry_bytes_ + 4 * kMiB, INT32_MAX));
  builder.SetMaxReceiveMessageSize(message_limit);
  builder.SetMaxSendMessageSize(message_limit);
  self->server_ = builder.BuildAndStart();
  if (!self->server_ || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", o.listen));
  }
  self->address_ = absl::StrCat(o.listen.substr(0, o.listen.rfind(':')), ":", port);
  spdlog::info("walserver {} listening on {} (Kafka {}, slots {}x{}, max entry {} bytes)", o.name,
               self->address_, self->mock_ ? "in-process mock" : brokers, o.topic_count,
               o.partitions_per_topic, self->max_entry_bytes_);
  return self;
}

WalServer::~WalServer() { Shutdown(); }

void WalServer::Shutdown(std::chrono::milliseconds grace) {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    server_.reset();
  }
  service_.reset();
  reader_.reset();
  writer_.reset();
  meta_.reset();
  admin_.reset();
  mock_.reset();
}

}  // namespace wal
