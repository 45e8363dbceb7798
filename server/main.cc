// walserver: a write-ahead-log service on Kafka. main() reads the options (server/flags.cc,
// server/common/config.h), starts a WalServer (server/wal_server.h), waits for SIGINT, SIGTERM
// or SIGHUP and shuts it down. docs/ARCHITECTURE.md follows an Append and a Read from here to
// Kafka.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <string>
#include <thread>

#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "server/common/config.h"
#include "server/common/logging.h"
#include "server/flags.h"
#include "server/kafka/client.h"
#include "server/wal_server.h"
#include "spdlog/spdlog.h"

namespace {

// Exit code for anything a person must fix in the options.
constexpr int kBadOptions = 2;

int Fail(int code, const absl::Status& status) {
  std::fprintf(stderr, "walserver: %s\n", std::string(status.message()).c_str());
  return code;
}

// Written whole, then renamed: a watcher never sees half of it. Line 1: the gRPC address;
// line 2: the HTTP address (empty when off).
void WriteReadyFile(const std::string& path, const wal::WalServer& server) {
  std::ofstream(path + ".tmp") << server.address() << "\n" << server.http_address() << "\n";
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv, char** envp) {
  absl::SetProgramUsageMessage(
      "walserver: a write-ahead-log service on Kafka.\n"
      "Usage: walserver --listen=HOST:PORT --brokers=HOST:PORT[,...] [options]\n"
      "Every option can also be set in a --config file or as WALSERVER_<OPTION> in the "
      "environment; --kafka.<property>=VALUE passes a property to librdkafka.");
  auto settings = wal::LoadSettings(argc, argv, envp);
  if (!settings.ok()) return Fail(kBadOptions, settings.status());
  if (settings->help) {
    wal::PrintHelp(std::cout);
    return 0;
  }
  if (settings->version) {
    std::cout << "walserver " << WALSERVER_VERSION << " (librdkafka " << wal::LibrdkafkaVersion()
              << ")\n";
    return 0;
  }
  if (absl::Status s = wal::ConfigureLogging(wal::LogFormatFlag(), wal::LogLevelFlag()); !s.ok()) {
    return Fail(kBadOptions, s);
  }
  auto options = wal::ServerOptionsFromFlags(settings->kafka_properties);
  if (!options.ok()) return Fail(kBadOptions, options.status());
  // absl::Mutex's deadlock detection costs a graph update per lock on the append path.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // sigwait() below takes the signals; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  // A closed terminal (or run.sh passing it on) drains like SIGTERM instead of killing at once;
  // under nohup SIGHUP is ignored and never arrives.
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = wal::WalServer::Start(*options);
  if (!server.ok()) {
    spdlog::critical("walserver could not start: {}", server.status().ToString());
    // Options that do not fit the cluster (too few brokers, topics made with other settings)
    // are fixed in the options too.
    const bool fix_options =
        absl::IsInvalidArgument(server.status()) || absl::IsFailedPrecondition(server.status());
    return fix_options ? kBadOptions : 1;
  }
  if (const std::string ready = wal::ReadyFileFlag(); !ready.empty()) {
    WriteReadyFile(ready, **server);
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {}: shutting down", signal_number);
  // Shutdown is bounded by its grace and Kafka's timeouts; should anything still block past
  // them (a bug, here or in librdkafka), exit anyway: every acknowledged append is in Kafka
  // already.
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
  return 0;
}
