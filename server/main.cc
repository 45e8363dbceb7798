// walserver: a write-ahead-log service on Kafka. main() reads the options, starts a WalServer,
// waits for SIGINT or SIGTERM and shuts it down.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "server/common/config.h"
#include "server/common/logging.h"
#include "server/kafka/admin.h"
#include "server/wal_server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen addresses, comma-separated: HOST:PORT or unix:///path/to/socket");
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
ABSL_FLAG(uint64_t, max_inflight_append_bytes, 0,
          "Entry bytes of appends waiting for Kafka; an append beyond gets RESOURCE_EXHAUSTED. "
          "0 means 4 x max_entry_bytes");
ABSL_FLAG(int, startup_timeout_ms, 60000, "How long start-up waits for Kafka");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding a bearer token: every call must then carry 'authorization: Bearer "
          "<token>' (UNAUTHENTICATED otherwise); the health service stays open");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain for TLS on the TCP listeners (with --tls_key_file)");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA certificates: clients must present a certificate signed by one of them");
ABSL_FLAG(int, prune_interval_ms, 60000,
          "How often records no live namespace can read are deleted from the slots "
          "(DeleteRecords); 0 turns pruning off. Off on the embedded mock cluster");
ABSL_FLAG(std::string, kafka_properties, "",
          "Extra librdkafka properties for every client, KEY=VALUE[,KEY=VALUE...] (security "
          "settings, for example); also settable one by one as --kafka.KEY=VALUE");
ABSL_FLAG(std::string, name, "", "Name of this server in Kafka client ids; default HOST-PID");
ABSL_FLAG(std::string, ready_file, "",
          "Once serving, write the listen address (with the real port) to this file");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn or error");
ABSL_FLAG(std::string, log_format, "text", "text, or json for one JSON object per line");
ABSL_FLAG(std::string, http_listen, "127.0.0.1:9464",
          "HOST:PORT of the HTTP port with Prometheus /metrics and /healthz; empty: off");
ABSL_FLAG(std::string, config, "",
          "Config file of 'name = value' lines (any option here, and kafka.<property> for "
          "librdkafka). Precedence: command line, then WALSERVER_<NAME> environment variables, "
          "then this file, then the defaults");

int main(int argc, char** argv, char** envp) {
  // --help lists the flags of this file (absl looks for a file named after the binary).
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "server/main.cc");
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(
      "A write-ahead-log service on Kafka.\n"
      "Usage: walserver --listen=HOST:PORT --brokers=HOST:PORT[,...] [options]\n"
      "Every option can also be set in a --config file or as WALSERVER_<OPTION> in the "
      "environment; --kafka.<property>=VALUE passes a property to librdkafka.");

  // ---- Options: exit code 2 for anything a person must fix ----
  auto settings = wal::LoadSettings(argc, argv, envp);
  if (!settings.ok()) {
    std::fprintf(stderr, "walserver: %s\n", std::string(settings.status().message()).c_str());
    return 2;
  }
  if (settings->help) {
    absl::flags_internal::SetProgramInvocationName("walserver");
    // Every option of this file, with its default. (absl's own --help handling exits with 1.)
    absl::flags_internal::FlagsHelp(std::cout, "server/main.",
                                    absl::flags_internal::HelpFormat::kHumanReadable,
                                    absl::ProgramUsageMessage());
    return 0;
  }
  if (absl::Status s =
          wal::ConfigureLogging(absl::GetFlag(FLAGS_log_format), absl::GetFlag(FLAGS_log_level));
      !s.ok()) {
    std::fprintf(stderr, "walserver: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  // absl::Mutex's deadlock detection costs a graph update per lock on the append path.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // sigwait() below takes the signals; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  wal::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.http_listen = absl::GetFlag(FLAGS_http_listen);
  options.brokers = absl::GetFlag(FLAGS_brokers);
  options.topic_prefix = absl::GetFlag(FLAGS_topic_prefix);
  options.topic_count = absl::GetFlag(FLAGS_topic_count);
  options.partitions_per_topic = absl::GetFlag(FLAGS_partitions_per_topic);
  options.replication_factor = absl::GetFlag(FLAGS_replication_factor);
  options.min_insync_replicas = absl::GetFlag(FLAGS_min_insync_replicas);
  options.max_entry_bytes = absl::GetFlag(FLAGS_max_entry_bytes);
  options.max_record_bytes = absl::GetFlag(FLAGS_max_record_bytes);
  options.producers = absl::GetFlag(FLAGS_producers);
  options.append_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_append_timeout_ms));
  options.admin_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_admin_timeout_ms));
  options.startup_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_startup_timeout_ms));
  options.max_concurrent_reads = absl::GetFlag(FLAGS_max_concurrent_reads);
  options.prune_interval = std::chrono::milliseconds(absl::GetFlag(FLAGS_prune_interval_ms));
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.max_inflight_append_bytes = absl::GetFlag(FLAGS_max_inflight_append_bytes);
  options.name = absl::GetFlag(FLAGS_name);
  for (absl::string_view kv :
       absl::StrSplit(absl::GetFlag(FLAGS_kafka_properties), ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first.empty() || p.second.empty()) {
      std::fprintf(stderr, "walserver: --kafka_properties: '%s' is not KEY=VALUE\n",
                   std::string(kv).c_str());
      return 2;
    }
    options.kafka_properties[p.first] = p.second;
  }
  for (const auto& [key, value] : settings->kafka_properties) options.kafka_properties[key] = value;

  // ---- Serve ----
  auto server = wal::WalServer::Start(options);
  if (!server.ok()) {
    spdlog::critical("walserver could not start: {}", server.status().ToString());
    return absl::IsInvalidArgument(server.status()) ? 2 : 1;
  }
  if (const std::string ready = absl::GetFlag(FLAGS_ready_file); !ready.empty()) {
    // Written whole, then renamed: a watcher never sees half of it. Line 1: the gRPC address;
    // line 2: the HTTP address (empty when off).
    std::ofstream(ready + ".tmp") << (*server)->address() << "\n"
                                  << (*server)->http_address() << "\n";
    std::rename((ready + ".tmp").c_str(), ready.c_str());
  }

  // ---- Wait for a signal, then shut down in reverse ----
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {}: shutting down", signal_number);
  // Shutdown is bounded by its grace and Kafka's timeouts; should a Kafka call still block
  // (librdkafka 2.0.2 has calls that wait for a broker that is down), exit anyway: every
  // acknowledged append is in Kafka already.
  std::promise<void> stopped;
  std::thread stopper([&] {
    (*server)->Shutdown();
    stopped.set_value();
  });
  if (stopped.get_future().wait_for(std::chrono::seconds(9)) != std::future_status::ready) {
    spdlog::error("shutdown: still waiting on Kafka after 9 s; exiting without closing it");
    spdlog::default_logger()->flush();
    _exit(0);
  }
  stopper.join();
  spdlog::info("walserver stopped");
  if (wal::AbandonedWatermarkQueries() > 0) {
    // Kafka clients were left open for queries still waiting on a broker (see kafka.h): exit
    // without running static destructors under their threads.
    spdlog::default_logger()->flush();
    _exit(0);
  }
  return 0;
}
