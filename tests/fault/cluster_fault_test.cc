// Faults injected into a 3-node Kafka cluster (replication factor 3, min.insync.replicas 2) under
// a steady append load, each checked with the Workload checker: the slot leader killed and
// restarted, walserver killed and restarted, every node down for 30 s. ./scripts/test.sh starts
// the cluster and passes its directory in $WAL_TEST_CLUSTER.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/kafka/client.h"
#include "tests/support/checker.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

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
  }
  void TearDown() override {
    // Whatever a test did, leave every node running for the next one.
    Cluster("cluster-start");
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
  std::unique_ptr<ServerProcess> StartServer() {
    auto p = ServerProcess::Start({"--brokers=" + brokers_, "--topic_prefix=" + prefix_,
                                   "--topic_count=2", "--partitions_per_topic=2",
                                   "--replication_factor=3", "--min_insync_replicas=2"});
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }
  // The node leading a partition, from a metadata request.
  int Leader(const std::string& topic, int32_t partition) {
    auto client = NewKafkaClient(RD_KAFKA_PRODUCER, {{"bootstrap.servers", brokers_}});
    if (!client.ok()) return -1;
    rd_kafka_topic_t* t = rd_kafka_topic_new(client->get(), topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    int leader = -1;
    if (rd_kafka_metadata(client->get(), 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      for (int i = 0; i < md->topic_cnt; ++i) {
        for (int p = 0; p < md->topics[i].partition_cnt; ++p) {
          if (md->topics[i].partitions[p].id == partition) {
            leader = md->topics[i].partitions[p].leader;
          }
        }
      }
      rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(t);
    return leader;
  }
  static std::function<std::unique_ptr<Client>()> Connector(const std::string& address) {
    return [address] { return Connect(address, seconds(60)); };
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

TEST_F(ClusterFaultTest, SlotLeaderKilledAndRestartedUnderLoad) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto admin = Connect(server->address());
  std::vector<uint64_t> namespaces{1, 2, 3, 4};
  for (uint64_t ns : namespaces) ASSERT_TRUE(admin->CreateNamespace(ns).ok());
  auto info = admin->GetNamespace(1);
  ASSERT_TRUE(info.ok());
  Workload load(Connector(server->address()), namespaces);
  load.Start();
  ASSERT_TRUE(load.WaitForProgress(200, seconds(30)));
  const int leader = Leader(info->topic(), info->partition());
  ASSERT_GE(leader, 1);
  const uint64_t before = load.acknowledged();
  ASSERT_TRUE(Node("node-kill", leader));
  // Two replicas remain: appends go on once a new leader is elected.
  EXPECT_TRUE(load.WaitForProgress(200, seconds(60))) << "no progress with one node down";
  const uint64_t during = load.acknowledged() - before;
  ASSERT_TRUE(Node("node-start", leader));
  EXPECT_TRUE(load.WaitForProgress(200, seconds(60)));
  load.Stop();
  Report("leader kill", load.Check(*admin),
         absl::StrCat("; node ", leader, " killed; ", during, " acknowledged while it was down"));
}

TEST_F(ClusterFaultTest, WalserverKilledMidLoadComesBackWithItsTable) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto admin = Connect(server->address());
  std::vector<uint64_t> namespaces{11, 12, 13, 14};
  for (uint64_t ns : namespaces) ASSERT_TRUE(admin->CreateNamespace(ns).ok());
  Workload load(Connector(server->address()), namespaces);
  load.Start();
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(load.WaitForProgress(200, seconds(60)));
    ASSERT_TRUE(server->Restart().ok());  // SIGKILL, then the same address again
  }
  ASSERT_TRUE(load.WaitForProgress(200, seconds(60)));
  load.Stop();
  auto listed = admin->ListNamespaces();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->size(), namespaces.size()) << "the table must come back from Kafka";
  Report("walserver kill", load.Check(*admin), "; walserver killed 3 times");
}

TEST_F(ClusterFaultTest, AllNodesDownFor30SecondsFailsFastAndRecovers) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto admin = Connect(server->address());
  std::vector<uint64_t> namespaces{21, 22};
  for (uint64_t ns : namespaces) ASSERT_TRUE(admin->CreateNamespace(ns).ok());
  ASSERT_TRUE(admin->CreateNamespace(23).ok());  // the probe's, outside the checked load
  Workload load(Connector(server->address()), namespaces);
  load.Start();
  ASSERT_TRUE(load.WaitForProgress(200, seconds(30)));
  const int64_t threads_before = ProcStatus(server->pid(), "Threads");
  const int64_t rss_before = ProcStatus(server->pid(), "VmRSS");

  for (int id = 1; id <= 3; ++id) ASSERT_TRUE(Node("node-kill", id));
  // A probe without retries: each call must come back UNAVAILABLE before its 2 s deadline.
  ClientOptions fast;
  fast.target = server->address();
  fast.timeout = seconds(2);
  fast.max_retries = 0;
  auto probe = Client::Connect(fast);
  ASSERT_TRUE(probe.ok());
  int64_t threads_max = 0, rss_max = 0;
  int probes = 0, unavailable = 0;
  milliseconds slowest{0};
  const auto outage_end = std::chrono::steady_clock::now() + seconds(30);
  while (std::chrono::steady_clock::now() < outage_end) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = (*probe)->Append(23, {"probe"});
    const auto took =
        std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0);
    ++probes;
    if (absl::IsUnavailable(r.status())) ++unavailable;
    slowest = std::max(slowest, took);
    threads_max = std::max(threads_max, ProcStatus(server->pid(), "Threads"));
    rss_max = std::max(rss_max, ProcStatus(server->pid(), "VmRSS"));
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_TRUE(Cluster("cluster-start"));
  const auto back = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<uint64_t>> after;
  do {
    after = (*probe)->Append(23, {"after"});
  } while (!after.ok() && std::chrono::steady_clock::now() - back < seconds(60));
  const auto resumed =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - back);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_TRUE(load.WaitForProgress(200, seconds(60)));
  load.Stop();

  EXPECT_EQ(unavailable, probes) << "every call during the outage must say UNAVAILABLE";
  EXPECT_LT(slowest, seconds(2)) << "answers must come before the caller's deadline";
  EXPECT_LE(threads_max - threads_before, 8) << "threads must stay bounded";
  EXPECT_LE(rss_max - rss_before, 64 * 1024) << "memory must stay bounded (kB)";
  EXPECT_LT(resumed, seconds(5)) << "service must resume within 5 s of Kafka coming back";
  Report("all nodes down 30 s", load.Check(*admin),
         absl::StrCat("; ", probes, " probes, all UNAVAILABLE, slowest ", slowest.count(),
                      " ms; threads ", threads_before, " -> max ", threads_max, "; RSS ",
                      rss_before / 1024, " -> max ", rss_max / 1024, " MiB; appends resumed ",
                      resumed.count(), " ms after the nodes were up"));
}

}  // namespace
}  // namespace wal::testing
