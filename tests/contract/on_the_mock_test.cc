// Contract tests that need the mock cluster's fault injection (unit_contract_test only).
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <chrono>
#include <functional>
#include <thread>

#include "tests/contract/contract_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A retry that arrives while its first copy is still on its way to Kafka waits for it rather
// than write a second copy that would land beside it.
// The mock cluster's round-trip time holds the first copy back.
TEST_F(ContractTest, ARetryWaitsForItsFirstCopyInFlight) {
  Create(5);
  const uint64_t end = NextEntryId(*client_, 5);
  rd_kafka_mock_cluster_t* cluster = server_->mock_cluster()->cluster();
  for (int broker = 1; broker <= 3; ++broker) rd_kafka_mock_broker_set_rtt(cluster, broker, 2000);
  absl::StatusOr<std::vector<uint64_t>> first, retried;
  std::thread first_attempt([&] { first = RawAppend(*client_, Sequenced(5, 58, {1})); });
  // Events, each seen by polling the state it changes: the first copy is in flight...
  const auto until = [](const std::function<bool()>& happened) {
    const auto give_up = std::chrono::steady_clock::now() + seconds(10);
    while (!happened() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    return happened();
  };
  EXPECT_TRUE(until([&] { return server_->metrics().appends_in_flight.load() == 1; }));
  v1::AppendRequest retry = Sequenced(5, 58, {1});
  retry.set_first_attempt_age_ms(1);
  std::thread retry_attempt([&] { retried = RawAppend(*client_, retry); });
  // ... and the retry waits for it.
  EXPECT_TRUE(until([&] { return server_->retried_entries().waiting() == 1; }));
  for (int broker = 1; broker <= 3; ++broker) rd_kafka_mock_broker_set_rtt(cluster, broker, 0);
  first_attempt.join();
  retry_attempt.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(*retried, *first);
  EXPECT_EQ(NextEntryId(*client_, 5), end + 1) << "one copy in the log";
}

}  // namespace
}  // namespace wal::testing
