// The fixture of the contract suite (tests/contract/, a file per call): an in-process
// walserver on the librdkafka mock cluster, or with WAL_TEST_REAL_KAFKA on the real Kafka broker
// that ./scripts/test.sh starts, and a client of it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace wal::testing {

class ContractTest : public ::testing::Test {
 public:  // the tests' helpers use the fixture too
  void SetUp() override {
    ServerOptions options = MockServerOptions();
#ifdef WAL_TEST_REAL_KAFKA
    options.brokers = TestBrokers();
    ASSERT_FALSE(options.brokers.empty()) << kNoKafka;
    options.replication_factor = 1;
    options.min_insync_replicas = 1;
#endif
    options.topic_prefix = UniqueName("contract");
    options.max_entry_bytes = 1 << 20;
    options.max_record_bytes = 64 * 1024;  // entries above 64 KiB are split
    StartServer(options);
  }

  void StartServer(const ServerOptions& options) {
    server_options_ = options;
    auto server = WalServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = Connect(server_->address());
    ASSERT_NE(client_, nullptr);
  }

  std::string Bootstrap() const {
#ifdef WAL_TEST_REAL_KAFKA
    return TestBrokers();
#else
    return server_->mock_cluster()->bootstrap_servers();
#endif
  }

  uint64_t Create(uint64_t ns) {
    auto created = client_->CreateNamespace(ns);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? created->ns.next_entry_id() : 0;
  }

  std::vector<uint64_t> Append(uint64_t ns, const std::vector<std::string>& data) {
    auto ids = client_->Append(ns, data);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<uint64_t>{};
  }

  std::vector<std::string> ReadData(uint64_t ns, uint64_t start = 0, uint64_t limit = 0) {
    auto entries = client_->ReadAll(ns, start, limit);
    EXPECT_TRUE(entries.ok()) << entries.status();
    std::vector<std::string> data;
    if (entries.ok()) {
      for (const auto& e : *entries) data.push_back(e.data());
    }
    return data;
  }

  std::unique_ptr<WalServer> server_;
  ServerOptions server_options_;  // what server_ started with
  std::unique_ptr<Client> client_;
};

}  // namespace wal::testing
