// The fixture of the tests that run walserver processes on the real Kafka broker that
// ./scripts/test.sh starts ($WAL_TEST_BROKERS): topics of each test's own, and servers on them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/test_util.h"

namespace wal::testing {

class KafkaProcessFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    brokers_ = TestBrokers();
    ASSERT_FALSE(brokers_.empty()) << kNoKafka;
    prefix_ =
        UniqueName(::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name());
  }

  // A walserver process on the test's topics, with `extra` flags, listening on `listen`; null
  // (and the test failed) when it does not start.
  std::unique_ptr<ServerProcess> StartServer(std::vector<std::string> extra = {},
                                             const std::string& listen = "127.0.0.1:0") {
    std::vector<std::string> args = KafkaServerArgs(brokers_, prefix_);
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = ServerProcess::Start(args, listen);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  // Options of a walserver in this process (so that its metrics can be read) on the test's
  // topics of the single-broker Kafka, in one slot.
  ServerOptions InProcessOneSlotOptions() const {
    ServerOptions options = MockServerOptions();
    options.brokers = brokers_;
    options.replication_factor = 1;
    options.min_insync_replicas = 1;
    options.topic_prefix = prefix_;
    options.topic_count = 1;
    options.partitions_per_topic = 1;
    return options;
  }

  std::string brokers_;
  std::string prefix_;  // of the test's topics
};

}  // namespace wal::testing
