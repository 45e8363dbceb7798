// Network faults between walserver and the 3-node Kafka cluster, each node in a network
// namespace of its own (tests/kafka/network.sh): walserver cut off from the leader of a slot
// while the cluster goes on, that leader cut off from the other nodes (a new leader is
// elected), a flapping link and a slow one. Each runs under the Workload checker's load and
// checks that nothing is lost, duplicated or reordered, that every call is answered by its
// deadline, and how soon appends to the slot succeed again.
#include <atomic>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/kafka/client.h"
#include "tests/fault/cluster_fixture.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Deadline of the load's calls, and of each probe append.
constexpr milliseconds kCallDeadline = seconds(10);
constexpr milliseconds kProbeDeadline = seconds(2);
// How late an answer may come after its deadline: the client's timer and the scheduling of
// this 2-core machine busy with three brokers, not walserver.
constexpr milliseconds kLateness{2000};
// How soon appends to a slot must succeed again once walserver can reach its leader, after a
// cut of 15 s. On a kernel that takes walserver's cap on TCP's retransmission interval (1 s,
// --kafka_rto_max_ms) the target is 2 s: 5 s leaves room for a loaded host, and still fails the
// 11-14 s of the doubling interval without the cap. Older kernels keep that doubling.
milliseconds BackAfterHealing() { return KernelCapsRto() ? seconds(5) : seconds(20); }

// What walserver logs when it drops its connections to a leader that names itself against the
// other brokers (each line names the broker: "broker N (host:port) names itself..."): only the
// test that cuts a leader off from the others may see it.
constexpr char kStaleLeaderDropped[] = "connections to it, so that librdkafka asks the others";

std::vector<std::string> LinesWith(const std::string& text, absl::string_view needle) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, needle)) lines.emplace_back(line);
  }
  return lines;
}

milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

struct Probing {
  int probes = 0;
  int succeeded = 0;
  milliseconds slowest{0};
};

class PartitionTest : public ClusterFaultTest {
 protected:
  void SetUp() override {
    ClusterFaultTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(InNamespaces())
        << "partition tests need the cluster's nodes in network namespaces of their own: make "
           "it as root with WAL_KAFKA_NETNS=1 (./scripts/test.sh does)";
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
    admin_ = Connect(server_->address());
    ASSERT_TRUE(Created(*admin_, *server_, namespaces_));
    auto slot = admin_->GetNamespace(namespaces_[0]);
    ASSERT_TRUE(slot.ok()) << slot.status();
    topic_ = slot->topic();
    partition_ = slot->partition();
    leader_ = Leader(topic_, partition_);
    ASSERT_GE(leader_, 1);
    // The probe appends to a namespace of its own on the same slot, outside the checked load.
    for (uint64_t id = 100; id < 120 && probe_ns_ == 0; ++id) {
      ASSERT_TRUE(Created(*admin_, *server_, {id}));
      auto info = admin_->GetNamespace(id);
      ASSERT_TRUE(info.ok()) << info.status();
      if (info->topic() == topic_ && info->partition() == partition_) probe_ns_ = id;
    }
    ASSERT_NE(probe_ns_, 0u) << "no namespace landed on the slot of namespace 1";
    ClientOptions once;
    once.target = server_->address();
    once.timeout = kProbeDeadline;
    once.max_retries = 0;
    auto probe = Client::Connect(once);
    ASSERT_TRUE(probe.ok()) << probe.status();
    probe_ = std::move(*probe);
    load_ = std::make_unique<Workload>(Connector(server_->address(), kCallDeadline), namespaces_);
    load_->Start();
    ASSERT_TRUE(load_->WaitForProgress(200, seconds(30)));
  }
  void TearDown() override {
    if (load_ != nullptr) load_->Stop();
    ClusterFaultTest::TearDown();
  }

  // One probe append after another for `duration`, each with kProbeDeadline.
  Probing ProbeFor(milliseconds duration) {
    Probing p;
    const auto end = Clock::now() + duration;
    while (Clock::now() < end) {
      const auto start = Clock::now();
      const bool ok = probe_->Append(probe_ns_, {"probe"}).ok();
      p.slowest = std::max(p.slowest, Since(start));
      ++p.probes;
      if (ok) ++p.succeeded;
      std::this_thread::sleep_for(milliseconds(100));  // a steady trickle, not a flood
    }
    return p;
  }
  // Probe appends until one succeeds; how long that took, or nothing after `limit`.
  std::optional<milliseconds> UntilAppendSucceeds(milliseconds limit) {
    const auto start = Clock::now();
    while (Since(start) < limit) {
      if (probe_->Append(probe_ns_, {"probe"}).ok()) return Since(start);
      std::this_thread::sleep_for(milliseconds(50));
    }
    return std::nullopt;
  }
  // The load goes on after the fault; nothing it wrote is lost, duplicated or reordered, and
  // every call was answered by its deadline.
  void Finish(const std::string& name, const std::string& figures) {
    ASSERT_TRUE(load_->WaitForProgress(200, seconds(60))) << "the load must go on after healing";
    load_->Stop();
    EXPECT_LE(load_->slowest_append(), kCallDeadline + kLateness);
    Report(name, load_->Check(*admin_),
           absl::StrCat("; ", figures, "; slowest append of the load ",
                        load_->slowest_append().count(), " ms"));
  }
  // How long an append of 256 KiB of random bytes to the probe's namespace takes (60 s deadline).
  milliseconds BigAppendTook() {
    std::string data(256 * 1024, '\0');
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (char& c : data) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<char>(x);
    }
    const auto start = Clock::now();
    EXPECT_TRUE(admin_->Append(probe_ns_, {data}).ok());
    return Since(start);
  }
  // Another node than `node`: the next one, or the one after.
  static int Other(int node, int step) { return (node - 1 + step) % 3 + 1; }

  const std::vector<uint64_t> namespaces_{1, 2, 3, 4};
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> admin_;
  std::unique_ptr<Client> probe_;
  std::unique_ptr<Workload> load_;
  std::string topic_;
  int32_t partition_ = 0;
  int leader_ = -1;
  uint64_t probe_ns_ = 0;
};

TEST_F(PartitionTest, WalserverCutOffFromItsSlotLeader) {
  // Namespaces on slots that other nodes lead must not wait for the cut one: each goes on.
  std::map<uint64_t, uint64_t> elsewhere;  // namespace -> entries acknowledged before the cut
  for (uint64_t ns : namespaces_) {
    auto info = admin_->GetNamespace(ns);
    ASSERT_TRUE(info.ok());
    if (Leader(info->topic(), info->partition()) != leader_) elsewhere[ns] = 0;
  }
  ASSERT_TRUE(Link("cut", 0, leader_));
  for (auto& [ns, before] : elsewhere) before = load_->acknowledged_of(ns);
  const Probing during = ProbeFor(seconds(15));
  uint64_t elsewhere_acknowledged = 0;
  std::vector<uint64_t> stalled;
  for (const auto& [ns, before] : elsewhere) {
    const uint64_t now = load_->acknowledged_of(ns);
    elsewhere_acknowledged += now - before;
    if (now == before) stalled.push_back(ns);
  }
  ASSERT_TRUE(Link("heal", 0, leader_));
  const auto back = UntilAppendSucceeds(seconds(60));

  EXPECT_EQ(during.succeeded, 0) << "the leader was out of reach: the cut did not hold";
  EXPECT_LE(during.slowest, kProbeDeadline + kLateness);
  EXPECT_TRUE(stalled.empty()) << "namespaces on slots other nodes lead stalled too: "
                               << absl::StrJoin(stalled, ", ");
  ASSERT_TRUE(back.has_value()) << "appends to the slot did not come back after healing";
  EXPECT_LT(*back, BackAfterHealing());
  EXPECT_FALSE(absl::StrContains(server_->log(), kStaleLeaderDropped))
      << "walserver dropped the connections to a leader the other brokers still named";
  Finish("walserver cut off from its slot leader",
         absl::StrCat(
             "node ", leader_, " cut off for 15 s; ", during.probes,
             " probes to its slot, all failed, slowest ", during.slowest.count(), " ms; ",
             elsewhere_acknowledged, " entries acknowledged in the ", elsewhere.size(),
             " namespaces on other slots meanwhile, each went on; the slot took appends again ",
             back->count(), " ms after healing"));
}

TEST_F(PartitionTest, SlotLeaderCutOffFromTheOtherNodes) {
  const int a = Other(leader_, 1), b = Other(leader_, 2);
  ASSERT_TRUE(Link("cut", leader_, a));
  ASSERT_TRUE(Link("cut", leader_, b));
  const auto cut = Clock::now();
  // walserver still reaches the old leader, which can no longer commit (its followers cannot
  // fetch, and it cannot shrink its ISR without the controller quorum): appends succeed again
  // only once the other two elect a new leader. When they do, asked of them alone: the old
  // leader goes on naming itself.
  // Watches until the naming, or 5 s after appends came back (which needs the naming).
  std::atomic<int64_t> watch_until_ms{std::numeric_limits<int64_t>::max()};  // since the cut
  std::optional<milliseconds> named;
  int new_leader = -1;
  std::thread watcher([&] {
    while (!named && Since(cut).count() < watch_until_ms) {
      for (int node : {a, b}) {
        const int leader = LeaderAsSeenBy(node, topic_, partition_);
        if (leader >= 1 && leader != leader_ && !named) {
          named = Since(cut);
          new_leader = leader;
        }
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
  });
  const auto moved = UntilAppendSucceeds(seconds(90));
  watch_until_ms = Since(cut).count() + 5000;
  watcher.join();
  ASSERT_TRUE(named.has_value()) << "the other nodes named no new leader";
  ASSERT_TRUE(moved.has_value()) << "no new leader took appends within 90 s of the cut";
  const Probing after_move = ProbeFor(seconds(5));
  ASSERT_TRUE(Link("heal", leader_, a));
  ASSERT_TRUE(Link("heal", leader_, b));

  // The target is 2 s after Kafka names the new leader (walserver drops its connections to the
  // old one, kafka/stale_leaders.h); 5 s leaves room for a loaded host, and still fails the 20 s
  // that records sent to the old leader waited for --append_timeout_ms before.
  const std::vector<std::string> drops = LinesWith(server_->log(), kStaleLeaderDropped);
  EXPECT_FALSE(drops.empty()) << "the slot moved, but not because walserver dropped the old leader";
  for (const std::string& line : drops) {
    EXPECT_TRUE(absl::StrContains(line, absl::StrCat("broker ", leader_, " (")))
        << "walserver dropped another broker than the cut-off leader " << leader_ << ": " << line;
  }
  EXPECT_LT(*moved - *named, seconds(5))
      << "appends came back " << (*moved - *named).count() << " ms after Kafka named node "
      << new_leader << " leader";
  EXPECT_EQ(after_move.succeeded, after_move.probes) << "appends failed after the new leader";
  Finish("slot leader cut off from the other nodes",
         absl::StrCat("node ", leader_, " cut off from nodes ", a, " and ", b, "; they named node ",
                      new_leader, " leader ", named->count(),
                      " ms after the cut; the slot took appends again ", moved->count(),
                      " ms after the cut, ", (*moved - *named).count(), " ms after the naming; ",
                      after_move.succeeded, " of ", after_move.probes,
                      " probes succeeded in the next 5 s"));
}

TEST_F(PartitionTest, FlappingLinkToTheSlotLeader) {
  // The fault itself is timed: one second cut, one second whole, ten times.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Link("cut", 0, leader_));
    std::this_thread::sleep_for(seconds(1));
    ASSERT_TRUE(Link("heal", 0, leader_));
    std::this_thread::sleep_for(seconds(1));
  }
  const auto back = UntilAppendSucceeds(seconds(60));
  ASSERT_TRUE(back.has_value()) << "appends to the slot did not come back after the flapping";
  EXPECT_LT(*back, BackAfterHealing());
  EXPECT_FALSE(absl::StrContains(server_->log(), kStaleLeaderDropped))
      << "walserver dropped the connections to a leader the other brokers still named";
  Finish("flapping link to the slot leader",
         absl::StrCat("link to node ", leader_,
                      " cut and healed 10 times, 1 s each; the slot "
                      "took appends ",
                      back->count(), " ms after the last healing"));
}

TEST_F(PartitionTest, SlowLinkToTheSlotLeader) {
  ASSERT_TRUE(Link("slow", 0, leader_, "1mbit"));
  const uint64_t before = load_->acknowledged();
  // 256 KiB that lz4 cannot shrink needs 2 s at 1 Mbit/s: the link really is slow.
  const milliseconds big_slow = BigAppendTook();
  const Probing during = ProbeFor(seconds(15));
  const uint64_t acknowledged = load_->acknowledged() - before;
  ASSERT_TRUE(Link("heal", 0, leader_));
  const auto back = UntilAppendSucceeds(seconds(60));
  const milliseconds big_healed = BigAppendTook();

  EXPECT_GE(big_slow, milliseconds(1500)) << "the link was not slowed";
  EXPECT_GT(during.succeeded, 0) << "a slow link must still carry appends";
  EXPECT_LE(during.slowest, kProbeDeadline + kLateness);
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(absl::StrContains(server_->log(), kStaleLeaderDropped))
      << "walserver dropped the connections to a leader the other brokers still named";
  Finish(
      "slow link to the slot leader",
      absl::StrCat("link to node ", leader_, " at 1 Mbit/s for 15 s; ", during.succeeded, " of ",
                   during.probes, " probes to its slot succeeded, slowest ", during.slowest.count(),
                   " ms; a 256 KiB append took ", big_slow.count(), " ms (", big_healed.count(),
                   " ms after healing); the load acknowledged ", acknowledged,
                   " entries meanwhile; ", back->count(), " ms to the first append after"));
}

}  // namespace
}  // namespace wal::testing
