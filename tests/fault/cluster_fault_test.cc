// Faults injected into a 3-node Kafka cluster (replication factor 3, min.insync.replicas 2) under
// a steady append load, each checked with the Workload checker: the slot leader killed and
// restarted, walserver killed and restarted, every node down for 30 s; and the metadata topic
// damaged on its leader's disk, repaired as walserver says. ./scripts/test.sh starts the cluster
// and passes its directory in $WAL_TEST_CLUSTER.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "tests/fault/cluster_fixture.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(ClusterFaultTest, SlotLeaderKilledAndRestartedUnderLoad) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto admin = Connect(server->address());
  std::vector<uint64_t> namespaces{1, 2, 3, 4};
  ASSERT_TRUE(Created(*admin, *server, namespaces));
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
  ASSERT_TRUE(Created(*admin, *server, namespaces));
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
  ASSERT_TRUE(Created(*admin, *server, namespaces));
  ASSERT_TRUE(Created(*admin, *server, {23}));  // the probe's, outside the checked load
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

// Flips one byte of the first copy of `pattern` in node `node`'s log of `topic` [0].
bool DamageRecord(const std::string& cluster, int node, const std::string& topic,
                  const std::string& pattern) {
  const std::filesystem::path dir =
      std::filesystem::path(cluster) / absl::StrCat("node-", node) / "data" / (topic + "-0");
  std::error_code error;
  for (const auto& file : std::filesystem::directory_iterator(dir, error)) {
    if (file.path().extension() != ".log") continue;
    std::fstream segment(file.path(), std::ios::in | std::ios::out | std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(segment)),
                            std::istreambuf_iterator<char>());
    const size_t at = bytes.find(pattern);
    if (at == std::string::npos) continue;
    segment.seekp(static_cast<std::streamoff>(at));
    segment.put(static_cast<char>(bytes[at] ^ 0x20));
    segment.flush();  // a failed write shows here, not when the stream closes
    return segment.good();
  }
  return false;
}

TEST_F(ClusterFaultTest, MetadataDamagedOnItsLeaderIsRepairedAsWalserverSays) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  // Its key's bytes, "ABCDEFGH", are easy to find in the metadata topic's log.
  constexpr uint64_t kNamespace = 0x4142434445464748;
  {
    auto admin = Connect(server->address());
    ASSERT_TRUE(Created(*admin, *server, {kNamespace}));
    ASSERT_TRUE(admin->Append(kNamespace, {"kept"}).ok());
  }
  ASSERT_EQ(server->Stop(), 0);
  const std::string meta = prefix_ + "_meta";
  const int leader = Leader(meta, 0);
  ASSERT_GE(leader, 1);
  ASSERT_TRUE(DamageRecord(cluster_, leader, meta, "ABCDEFGH"));

  const absl::Status refused = server->Restart();
  ASSERT_FALSE(refused.ok()) << "walserver started on a namespace table missing a record";
  const std::string said(refused.message());
  EXPECT_TRUE(absl::StrContains(said, absl::StrCat("broker ", leader, " (")) &&
              absl::StrContains(said, absl::StrCat("which leads ", meta, "[0]")) &&
              absl::StrContains(said, "Copies in sync are on broker(s) "))
      << said;

  // As it says: the leader stopped, its copy removed, started again; it copies the partition
  // back from the others.
  ASSERT_TRUE(Node("node-stop", leader));
  std::filesystem::remove_all(std::filesystem::path(cluster_) / absl::StrCat("node-", leader) /
                              "data" / (meta + "-0"));
  ASSERT_TRUE(Node("node-start", leader));
  ASSERT_TRUE(AllNodesInTheCluster(std::chrono::seconds(60)));
  ASSERT_TRUE(server->Restart().ok()) << "walserver must start on the repaired topic";
  auto admin = Connect(server->address());
  auto entries = admin->ReadAll(kNamespace);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].data(), "kept");
}

}  // namespace
}  // namespace wal::testing
