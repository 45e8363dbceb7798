// The fixture of the fault tests: the 3-node Kafka cluster that ./scripts/test.sh starts (its
// directory in $WAL_TEST_CLUSTER), its nodes and links to break, and walserver to run on it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/kafka/client.h"
#include "tests/support/checker.h"
#include "tests/support/test_util.h"

namespace wal::testing {

class ClusterFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("WAL_TEST_CLUSTER");
    ASSERT_NE(dir, nullptr) << "WAL_TEST_CLUSTER is not set: fault tests need the 3-node Kafka "
                               "cluster that ./scripts/test.sh starts";
    cluster_ = dir;
    std::ifstream in(cluster_ + "/bootstrap");
    std::getline(in, brokers_);
    ASSERT_FALSE(brokers_.empty());
    prefix_ = UniqueName("fault");
    // Every link whole, also after a test that was killed before its TearDown.
    if (InNamespaces()) {
      ASSERT_EQ(std::system(NETWORK_SH " up >&2"), 0);
    }
  }
  void TearDown() override {
    // Whatever a test did, leave every node running and every link whole for the next one, and
    // back in the cluster: a node cut off was fenced, and topics of the next test need it.
    EXPECT_TRUE(Cluster("cluster-start"));
    EXPECT_TRUE(AllNodesInTheCluster(std::chrono::seconds(60)));
  }
  // True once a metadata request names all three nodes as live brokers, and every partition
  // has all its replicas in sync again: a node just restarted is live before its replicas have
  // caught up, and the next test must not start on a cluster still healing.
  bool AllNodesInTheCluster(std::chrono::milliseconds timeout) {
    auto client = NewKafkaClient(RD_KAFKA_PRODUCER, {{"bootstrap.servers", brokers_}});
    if (!client.ok()) return false;
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      const rd_kafka_metadata_t* md = nullptr;
      if (rd_kafka_metadata(client->get(), 1, nullptr, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        bool whole = md->broker_cnt == 3;
        for (int t = 0; whole && t < md->topic_cnt; ++t) {
          const rd_kafka_metadata_topic_t& topic = md->topics[t];
          for (int p = 0; whole && p < topic.partition_cnt; ++p) {
            const rd_kafka_metadata_partition_t& partition = topic.partitions[p];
            whole = partition.leader >= 0 && partition.isr_cnt == partition.replica_cnt;
          }
        }
        rd_kafka_metadata_destroy(md);
        if (whole) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    return false;
  }
  bool Node(const std::string& verb, int id) {
    const std::string command = absl::StrCat(KAFKA_SH, " ", verb, " ", cluster_, " ", id, " >&2");
    return std::system(command.c_str()) == 0;
  }
  // Starts the nodes that are down, all at once (one alone has no quorum), and waits for all.
  bool Cluster(const std::string& verb) {
    const std::string command = absl::StrCat(KAFKA_SH, " ", verb, " ", cluster_, " >&2");
    return std::system(command.c_str()) == 0;
  }
  // True when each node runs in a network namespace of its own (WAL_KAFKA_NETNS=1 when the
  // cluster was made), so that Link can break one link between two of them.
  bool InNamespaces() const { return std::filesystem::exists(cluster_ + "/netns"); }
  // tests/kafka/network.sh `verb` A B [RATE]: "cut", "slow" or "heal" the link between nodes a
  // and b, where 0 is this host (the test and walserver) and 1-3 are the Kafka nodes.
  static bool Link(const std::string& verb, int a, int b, const std::string& rate = "") {
    const std::string command = absl::StrCat(NETWORK_SH, " ", verb, " ", a, " ", b, " ", rate);
    return std::system(command.c_str()) == 0;
  }
  std::unique_ptr<ServerProcess> StartServer() {
    auto p = ServerProcess::Start({"--brokers=" + brokers_, "--topic_prefix=" + prefix_,
                                   "--topic_count=2", "--partitions_per_topic=2",
                                   "--replication_factor=3", "--min_insync_replicas=2"});
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }
  // Creates each namespace; on failure says why, with the end of walserver's log: a create
  // that fails here means the cluster was not ready for the test, and the log tells which part.
  static ::testing::AssertionResult Created(Client& admin, const ServerProcess& server,
                                            const std::vector<uint64_t>& namespaces) {
    for (uint64_t ns : namespaces) {
      const auto t0 = std::chrono::steady_clock::now();
      auto created = admin.CreateNamespace(ns);
      if (created.ok()) continue;
      const std::string log = server.log();
      const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - t0);
      return ::testing::AssertionFailure()
             << "CreateNamespace(" << ns << ") failed after " << took.count()
             << " ms: " << created.status() << "\nend of walserver's log:\n"
             << log.substr(log.size() > 6000 ? log.size() - 6000 : 0);
    }
    return ::testing::AssertionSuccess();
  }
  // The node leading a partition, from a metadata request to any node.
  int Leader(const std::string& topic, int32_t partition) {
    return AskForLeader(brokers_, topic, partition).leader;
  }
  // The same, as node `node` names it (a node cut off from the others still names itself), or
  // -1. A new client bootstrapped on it may ask another node once it knows them: asked again.
  int LeaderAsSeenBy(int node, const std::string& topic, int32_t partition) {
    std::ifstream in(absl::StrCat(cluster_, "/node-", node, "/bootstrap"));
    std::string address;
    std::getline(in, address);
    for (int attempt = 0; attempt < 5 && !address.empty(); ++attempt) {
      const LeaderAnswer answer = AskForLeader(address, topic, partition);
      if (answer.by == node || answer.by_name.rfind(address + "/", 0) == 0) return answer.leader;
    }
    return -1;
  }
  struct LeaderAnswer {
    int leader = -1;
    int by = -1;          // the node that answered; -1 for a bootstrap broker
    std::string by_name;  // its name: host:port/(id|bootstrap)
  };
  static LeaderAnswer AskForLeader(const std::string& bootstrap, const std::string& topic,
                                   int32_t partition) {
    LeaderAnswer answer;
    auto client = NewKafkaClient(RD_KAFKA_PRODUCER, {{"bootstrap.servers", bootstrap}});
    if (!client.ok()) return answer;
    rd_kafka_topic_t* t = rd_kafka_topic_new(client->get(), topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    if (rd_kafka_metadata(client->get(), 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      answer.by = md->orig_broker_id;
      answer.by_name = md->orig_broker_name != nullptr ? md->orig_broker_name : "";
      for (int i = 0; i < md->topic_cnt; ++i) {
        for (int p = 0; p < md->topics[i].partition_cnt; ++p) {
          if (md->topics[i].partitions[p].id == partition) {
            answer.leader = md->topics[i].partitions[p].leader;
          }
        }
      }
      rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(t);
    return answer;
  }
  static std::function<std::unique_ptr<Client>()> Connector(
      const std::string& address, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    return [address, timeout] { return Connect(address, timeout); };
  }
  void Report(const std::string& name, const Verdict& v, const std::string& extra = "") {
    std::cerr << "RESULT " << name << ": " << v.Summary() << extra << "\n";
    EXPECT_TRUE(v.clean()) << v.Summary();
    EXPECT_GT(v.acknowledged, 0u);
  }

  std::string cluster_;
  std::string brokers_;
  std::string prefix_;
};

}  // namespace wal::testing
