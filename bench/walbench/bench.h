// Bench: the walserver, clients and namespaces the modes share; each mode is one of its methods.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/walbench/direct_kafka.h"
#include "bench/walbench/entries.h"
#include "bench/walbench/flags.h"
#include "bench/walbench/measure.h"
#include "bench/walbench/walserver_process.h"
#include "client/wal_client.h"

namespace walbench {

struct Bench {
  Walserver server{absl::StrCat("bench", getpid())};
  std::unique_ptr<wal::Client> client;  // appends on the append stream (walclient's default)
  std::unique_ptr<wal::Client> unary;   // one unary Append call per append
  DirectProducer direct;
  std::string payload = Payload(absl::GetFlag(FLAGS_entry_bytes));
  int threads = absl::GetFlag(FLAGS_threads);
  int runs = absl::GetFlag(FLAGS_runs);
  // One namespace per caller thread; the direct runs write the same slots.
  std::vector<wal::v1::Namespace> namespaces;
  double max_single_rate = 0;

  // Starts the shared walserver, connects both clients and creates the namespaces (bench.cc).
  void Setup();

  // Appending (append_modes.cc).
  void Regions();
  Row ServiceBatches(int batch, wal::Client& c, const std::string& system);
  Row DirectBatches(int batch);
  void Throughput();
  void Single();
  Row OpenLoop(const std::string& system, double rate,
               const std::function<void(std::function<void()>)>& send);
  void Latency();

  // Reading (read_modes.cc).
  Row FollowService(const wal::v1::Namespace& ns, int count, const std::string& follower_address,
                    const std::string& system);
  Row FollowDirect(const wal::v1::Namespace& ns, int count);
  Row FollowRow(const std::string& system, Latencies& latencies, int count);
  void Follow();
  void Replay();
  // Replays through the slot index against without it (index_mode.cc).
  void Index();

  // Many namespaces, and walserver's start-up with them (scale_modes.cc).
  Row SpreadLoad(wal::Client& c, pid_t pid, int n);
  Row CreateConcurrently(wal::Client& c, pid_t pid, int from, int to);
  void Sweep();

  // The codecs of --codecs (compression_mode.cc).
  void Compression();
};

// Reads namespace `ns` whole through `c`; returns the entry bytes delivered (stops on an error).
uint64_t ReadWhole(wal::Client& c, uint64_t ns);

}  // namespace walbench
