// The fixture of the contract suite (tests/contract/, a file per call, and a file each for what
// only the mock or only real Kafka can run): an in-process walserver on the librdkafka mock
// cluster (unit_contract_test) or on the real Kafka broker that ./scripts/test.sh starts
// (integration_contract_test), and a client of it. Both executables link the same objects of the
// files that run on either; OnRealKafka() says which one this is.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/kafka_mode.h"
#include "tests/support/test_util.h"

namespace wal::testing {

class ContractTest : public ::testing::Test {
 public:  // the tests' helpers use the fixture too
  void SetUp() override {
    ServerOptions options = MockServerOptions();
    if (OnRealKafka()) {
      options.brokers = TestBrokers();
      ASSERT_FALSE(options.brokers.empty()) << kNoKafka;
      options.replication_factor = 1;
      options.min_insync_replicas = 1;
    }
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
    return OnRealKafka() ? TestBrokers() : server_->mock_cluster()->bootstrap_servers();
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

// A request of `writer` with one entry per sequence, for namespace `ns`.
inline v1::AppendRequest Sequenced(uint64_t ns, uint64_t writer,
                                   const std::vector<uint64_t>& sequences) {
  v1::AppendRequest request;
  request.set_writer_id(writer);
  for (uint64_t seq : sequences) {
    auto* e = request.add_entries();
    e->set_namespace_id(ns);
    e->set_sequence(seq);
    e->set_data(absl::StrCat("entry of sequence ", seq));
  }
  return request;
}

// Append as one unary call, with no retries: what walserver answered.
inline absl::StatusOr<std::vector<uint64_t>> RawAppend(Client& client,
                                                       const v1::AppendRequest& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::AppendResponse response;
  const grpc::Status status = client.stub().Append(&ctx, request, &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  return std::vector<uint64_t>(response.entry_ids().begin(), response.entry_ids().end());
}

inline uint64_t NextEntryId(Client& client, uint64_t ns) {
  auto got = client.GetNamespace(ns);
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? got->next_entry_id() : 0;
}

}  // namespace wal::testing
