// Helpers shared by the test suites: unique names, servers in-process or as child processes,
// and the round-trip workload.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "client/wal_client.h"
#include "server/kafka/producer.h"
#include "server/wal_server.h"

namespace wal::testing {

// A name no other test or run uses (topic prefixes, directories).
std::string UniqueName(const std::string& base);

// Brokers of the real Kafka the test scripts started ($WAL_TEST_BROKERS); empty when unset.
std::string TestBrokers();
// The message a test fails with when it needs Kafka and none was started.
inline constexpr char kNoKafka[] =
    "WAL_TEST_BROKERS is not set: integration tests need the real Kafka that "
    "./scripts/test.sh starts";

// A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral ports (for an
// address that must stay the same across restarts: no outgoing connection takes it meanwhile).
int FreePort();
// The first of the kernel's ephemeral ports (net.ipv4.ip_local_port_range).
int EphemeralPortsStart();
// Whether a socket can bind 127.0.0.1:`port` now.
bool PortIsFree(int port);

// Options of an in-process server on the mock cluster, listening on a free port.
ServerOptions MockServerOptions();

std::unique_ptr<Client> Connect(const std::string& address,
                                std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Counts the Append answers a LosingClient threw away.
struct LostAnswers {
  std::atomic<int> count{0};
};
// A client whose channel loses the answer of every `lose_every`-th successful Append after
// walserver wrote it: the client sees UNAVAILABLE, as after a dropped connection, and retries
// with the same sequences. On the append stream (options.append_stream), every
// `lose_every`-th message of answers is lost with the stream (cancelled), and the client
// sends the appends again on a new one. `lost` must outlive the client.
std::unique_ptr<Client> LosingClient(const std::string& address, int lose_every, LostAnswers* lost,
                                     ClientOptions options = {});

// walserver as a child process (the binary the build made), for restart and multi-server tests.
class ServerProcess {
 public:
  // Starts `walserver` with `args` (plus --listen and --ready_file) and waits until it serves.
  // By default on a free port of FreePort's, which Restart keeps.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      std::vector<std::string> args, const std::string& listen = "127.0.0.1:0");
  ~ServerProcess();  // SIGKILL if still running

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // What it logged so far, over all its restarts.
  std::string log() const;
  // SIGTERM and wait; returns the exit status.
  int Stop();
  // SIGKILL and wait, as a crash would.
  void Kill();
  // Kill() if running, then start again with the same arguments on the same address.
  absl::Status Restart();

 private:
  absl::Status Launch(const std::string& listen);
  pid_t pid_ = -1;
  std::vector<std::string> args_;
  std::string address_;
  std::string dir_;
};

// Writes one record straight to a slot with librdkafka, as another (perhaps lagging) walserver
// would; returns its offset.
absl::StatusOr<int64_t> ProduceRaw(const std::string& bootstrap, const std::string& topic,
                                   int32_t partition, const std::string& key,
                                   const std::string& value);

struct RawRecord {
  int64_t offset = 0;
  std::string key;
  std::string value;
};
// Every record of a slot, straight from Kafka (what a checker compares walserver's reads with).
absl::StatusOr<std::vector<RawRecord>> ReadSlotRaw(const std::string& bootstrap,
                                                   const std::string& topic, int32_t partition);
// How many whole copies of each entry (namespace, writer id, sequence) a slot holds, straight
// from Kafka, packed or not; a split entry torn by a crash is no copy (reads skip it). A retry
// written a second time counts 2.
using EntryName = std::tuple<uint64_t, uint64_t, uint64_t>;
absl::StatusOr<std::map<EntryName, int>> EntryCopies(const std::string& bootstrap,
                                                     const std::string& topic, int32_t partition);

// Arguments that point walserver at the test Kafka with topics of its own.
std::vector<std::string> KafkaServerArgs(const std::string& brokers, const std::string& prefix);

// A numeric line of /proc/PID/status, e.g. "Threads" or "VmRSS" (in KiB); -1 if absent.
int64_t ProcStatus(pid_t pid, const std::string& field);

// Raises in each of `producers` the fatal error librdkafka raises when an idempotent producer's
// sequence state breaks, and waits (up to 5 s) until every one saw it. OK, or why not.
absl::Status InjectFatalProducerErrors(const std::vector<const Producer*>& producers);
// The same for each of `writer`'s producers.
absl::Status InjectFatalProducerErrors(const EntryWriter& writer);

std::string RandomData(std::mt19937_64& rng, size_t size);

// Creates `namespaces` namespaces from `first_id` on, appends `entries` entries in batches that
// mix namespaces, reads every namespace back and checks bytes, ids and order (gtest assertions).
void RoundTrip(Client& client, uint64_t first_id, int namespaces, int entries, uint32_t seed);

// Deletes `topic` and waits until the broker no longer knows it (a gtest failure if not).
void DeleteTopic(rd_kafka_t* admin, const std::string& topic);

}  // namespace wal::testing
