// Kafka goes away under a running walserver and comes back. The test runs a broker of its own
// (tests/kafka/kafka.sh), so stopping it disturbs no other test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

class OwnBroker {
 public:
  OwnBroker() : dir_((std::filesystem::temp_directory_path() / UniqueName("kafka")).string()) {}
  ~OwnBroker() {
    Run("stop");
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  bool Run(const std::string& verb) {
    const std::string command = std::string(KAFKA_SH) + " " + verb + " " + dir_ + " >&2";
    return std::system(command.c_str()) == 0;
  }
  std::string Bootstrap() const {
    std::ifstream in(dir_ + "/bootstrap");
    std::string address;
    std::getline(in, address);
    return address;
  }

 private:
  std::string dir_;
};

TEST(KafkaOutage, CallsFailFastWhileKafkaIsDownAndRecoverWithoutRestart) {
  OwnBroker broker;
  ASSERT_TRUE(broker.Run("start"));
  auto server = ServerProcess::Start(KafkaServerArgs(broker.Bootstrap(), UniqueName("outage")));
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect((*server)->address(), seconds(3));
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  auto before = client->Append(1, {"before"});
  ASSERT_TRUE(before.ok()) << before.status();

  ASSERT_TRUE(broker.Run("stop"));
  auto t0 = Clock::now();
  auto append = client->Append(1, {"during"});
  EXPECT_EQ(append.status().code(), absl::StatusCode::kUnavailable) << append.status();
  EXPECT_LT(Clock::now() - t0, seconds(3)) << "must answer within the 3 s deadline";
  t0 = Clock::now();
  auto read = client->ReadAll(1);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnavailable) << read.status();
  EXPECT_LT(Clock::now() - t0, seconds(3));

  ASSERT_TRUE(broker.Run("start"));
  t0 = Clock::now();
  absl::StatusOr<std::vector<uint64_t>> after;
  do {
    after = client->Append(1, {"after"});
  } while (!after.ok() && Clock::now() - t0 < seconds(60));
  ASSERT_TRUE(after.ok()) << after.status();
  std::cerr << "appends succeeded again "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()
            << " ms after the broker was ready\n";
  auto all = client->ReadAll(1);
  ASSERT_TRUE(all.ok()) << all.status();
  // "during" may have been written later: its outcome was reported as unknown.
  ASSERT_GE(all->size(), 2u);
  EXPECT_EQ(all->front().data(), "before");
  EXPECT_EQ(all->front().entry_id(), (*before)[0]);
  EXPECT_EQ(all->back().data(), "after");
  EXPECT_EQ(all->back().entry_id(), (*after)[0]);
}

// Admin calls answered with an error while the broker is down (anything but DEADLINE_EXCEEDED,
// which says the outcome is unknown) have taken no effect once it is back, and none later.
TEST(KafkaOutage, AdminCallsThatFailedDuringAnOutageNeverTakeEffect) {
  OwnBroker broker;
  ASSERT_TRUE(broker.Run("start"));
  auto server = ServerProcess::Start(KafkaServerArgs(broker.Bootstrap(), UniqueName("admin")));
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions options;
  options.target = (*server)->address();
  options.timeout = seconds(2);
  options.max_retries = 0;  // one attempt each: its answer is the server's
  auto connected = Client::Connect(options);
  ASSERT_TRUE(connected.ok()) << connected.status();
  auto& client = *connected;
  for (uint64_t id : {1, 2, 3}) ASSERT_TRUE(client->CreateNamespace(id).ok());
  auto ids = client->Append(3, {"a", "b"});
  ASSERT_TRUE(ids.ok()) << ids.status();
  const uint64_t epoch = client->GetNamespace(2)->epoch();
  const uint64_t first = client->GetNamespace(3)->first_entry_id();

  ASSERT_TRUE(broker.Run("stop"));
  const auto timed = [](const char* what, auto call) {
    const auto t0 = Clock::now();
    const absl::Status status = call();
    const auto took = Clock::now() - t0;
    std::cerr << "RESULT outage: " << what << " answered " << status << " after "
              << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
    EXPECT_LT(took, std::chrono::milliseconds(2500)) << what << " must answer by its deadline";
    EXPECT_FALSE(status.ok()) << what;
    return status;
  };
  const absl::Status deleted = timed("DeleteNamespace", [&] { return client->DeleteNamespace(1); });
  const absl::Status acquired =
      timed("AcquireNamespace", [&] { return client->AcquireNamespace(2).status(); });
  const absl::Status truncated =
      timed("Truncate", [&] { return client->Truncate(3, (*ids)[1]).status(); });

  ASSERT_TRUE(broker.Run("start"));
  auto healthy = Connect((*server)->address(), seconds(5));
  // Back once an append goes through: within a few seconds of the broker's return (its start
  // waits for every listener, so a broker that could not bind one fails it instead).
  const auto t0 = Clock::now();
  absl::Status back;
  while (!(back = healthy->Append(3, {"c"}).status()).ok() && Clock::now() - t0 < seconds(60)) {
  }
  ASSERT_TRUE(back.ok()) << "walserver did not take appends within 60 s of Kafka's return: "
                         << back;
  std::cerr << "appends succeeded again "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()
            << " ms after the broker was ready\n";
  // Records left in a producer would land within seconds of the broker's return.
  std::this_thread::sleep_for(seconds(10));
  const auto unknown = [](const absl::Status& s) { return absl::IsDeadlineExceeded(s); };
  if (!unknown(deleted)) {
    auto ns = healthy->GetNamespace(1);
    EXPECT_TRUE(ns.ok()) << "failed DeleteNamespace took effect: " << ns.status();
  }
  if (!unknown(acquired)) {
    auto ns = healthy->GetNamespace(2);
    ASSERT_TRUE(ns.ok()) << ns.status();
    EXPECT_EQ(ns->epoch(), epoch) << "failed AcquireNamespace took effect";
  }
  if (!unknown(truncated)) {
    auto ns = healthy->GetNamespace(3);
    ASSERT_TRUE(ns.ok()) << ns.status();
    EXPECT_EQ(ns->first_entry_id(), first) << "failed Truncate took effect";
  }
  EXPECT_FALSE(unknown(deleted) && unknown(acquired) && unknown(truncated))
      << "every call said its outcome is unknown: nothing was shown";
}

// SIGTERM while Kafka is unreachable: walserver exits within 10 s (its 5 s grace for calls plus
// closing its Kafka clients), with a pruning pass, an append and a save of the slot index
// waiting on Kafka at the time.
TEST(KafkaOutage, SigtermWhileKafkaIsDownExitsWithinTenSeconds) {
  OwnBroker broker;
  ASSERT_TRUE(broker.Run("start"));
  std::vector<std::string> args = KafkaServerArgs(broker.Bootstrap(), UniqueName("sigterm"));
  args.push_back("--prune_interval_ms=300");  // a pass is under way when Kafka goes
  // The read's index is not saved before the stop: the last save waits on Kafka.
  args.push_back("--read_index_save_interval_ms=600000");
  auto server = ServerProcess::Start(args);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect((*server)->address(), seconds(10));
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  ASSERT_TRUE(client->Append(1, {"before"}).ok());
  ReadOptions read;
  read.namespace_id = 1;
  int entries = 0;
  ASSERT_TRUE(client->Read(read, [&](v1::Entry&) { return ++entries > 0; }).ok());
  ASSERT_EQ(entries, 1);

  ASSERT_TRUE(broker.Run("stop"));
  // An append that waits for Kafka until walserver goes.
  std::thread waiting([&] { (void)client->Append(1, {"during"}); });
  std::this_thread::sleep_for(seconds(1));
  const auto t0 = Clock::now();
  const int exit_code = (*server)->Stop();
  const auto took = Clock::now() - t0;
  waiting.join();
  std::cerr << "RESULT sigterm with Kafka down: exit " << exit_code << " after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  EXPECT_EQ(exit_code, 0);
  // The 5 s grace and closing the clients; walserver's last-resort exit comes at 9 s.
  EXPECT_LT(took, seconds(7));
}

}  // namespace
}  // namespace wal::testing
