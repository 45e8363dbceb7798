// walserver processes on the real Kafka broker that ./scripts/test.sh starts: large entries, two
// servers racing, restarts, and the embedded default.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::seconds;

class KafkaProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    brokers_ = TestBrokers();
    ASSERT_FALSE(brokers_.empty()) << kNoKafka;
    prefix_ = UniqueName("proc");
  }
  std::unique_ptr<ServerProcess> StartServer(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = KafkaServerArgs(brokers_, prefix_);
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = ServerProcess::Start(args);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }
  std::string brokers_;
  std::string prefix_;
};

TEST_F(KafkaProcessTest, LargeEntriesRoundTripAndOversizeIsRejected) {
  auto server = StartServer();  // the default limit: 64 MiB
  ASSERT_NE(server, nullptr);
  auto client = Connect(server->address(), seconds(120));
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  std::mt19937_64 rng(11);
  const std::string five = RandomData(rng, 5 << 20);
  const std::string fifty = RandomData(rng, 50 << 20);
  auto ids = client->Append(1, {five});
  ASSERT_TRUE(ids.ok()) << ids.status();
  ids = client->Append(1, {fifty});
  ASSERT_TRUE(ids.ok()) << ids.status();

  const uint64_t end = client->GetNamespace(1)->next_entry_id();
  auto over = client->Append(1, {std::string((64 << 20) + 1, 'z')});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument) << over.status();
  EXPECT_EQ(client->GetNamespace(1)->next_entry_id(), end) << "nothing may be written";

  auto entries = client->ReadAll(1);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_TRUE((*entries)[0].data() == five) << "5 MiB entry differs";
  EXPECT_TRUE((*entries)[1].data() == fifty) << "50 MiB entry differs";
  EXPECT_EQ((*entries)[1].entry_id(), (*ids)[0]);
}

TEST_F(KafkaProcessTest, TwoServersRacingOnCreateAgree) {
  auto a = StartServer({"--name=racer-a"});
  auto b = StartServer({"--name=racer-b"});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto ca = Connect(a->address());
  auto cb = Connect(b->address());
  constexpr int kCount = 100;
  std::vector<absl::StatusOr<CreateNamespaceResult>> ra(kCount), rb(kCount);
  // Both servers create the same ids at the same time, each in its own order.
  std::thread ta([&] {
    for (int i = 0; i < kCount; ++i) ra[i] = ca->CreateNamespace(1000 + i);
  });
  std::thread tb([&] {
    for (int i = kCount - 1; i >= 0; --i) rb[i] = cb->CreateNamespace(1000 + i);
  });
  ta.join();
  tb.join();
  std::set<std::pair<std::string, int>> slots;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(ra[i].ok()) << ra[i].status();
    ASSERT_TRUE(rb[i].ok()) << rb[i].status();
    EXPECT_EQ(ra[i]->ns.topic(), rb[i]->ns.topic()) << "namespace " << 1000 + i;
    EXPECT_EQ(ra[i]->ns.partition(), rb[i]->ns.partition()) << "namespace " << 1000 + i;
    EXPECT_EQ(ra[i]->ns.first_entry_id(), rb[i]->ns.first_entry_id());
    EXPECT_NE(ra[i]->created, rb[i]->created) << "exactly one server created " << 1000 + i;
    slots.insert({ra[i]->ns.topic(), ra[i]->ns.partition()});
  }
  EXPECT_EQ(slots.size(), 4u) << "100 namespaces spread over all 4 slots";
  // Entries written through one server are read through the other.
  ASSERT_TRUE(ca->Append(1050, {"via a"}).ok());
  ASSERT_TRUE(cb->Append(1050, {"via b"}).ok());
  auto read = cb->ReadAll(1050);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].data(), "via a");
  EXPECT_EQ((*read)[1].data(), "via b");
  // A restarted server sees the same table.
  b->Stop();
  auto c = StartServer();
  auto cc = Connect(c->address());
  for (int i = 0; i < kCount; ++i) {
    auto ns = cc->GetNamespace(1000 + i);
    ASSERT_TRUE(ns.ok()) << ns.status();
    EXPECT_EQ(ns->topic(), ra[i]->ns.topic());
    EXPECT_EQ(ns->partition(), ra[i]->ns.partition());
  }
}

TEST_F(KafkaProcessTest, RestartKeepsTableTruncationAndEntries) {
  struct Ns {
    uint64_t id;
    std::vector<uint64_t> ids;
    std::vector<std::string> data;
  };
  std::vector<Ns> all;
  {
    auto server = StartServer();
    ASSERT_NE(server, nullptr);
    auto client = Connect(server->address());
    for (uint64_t id = 1; id <= 6; ++id) {
      ASSERT_TRUE(client->CreateNamespace(id).ok());
      Ns ns{id, {}, {}};
      for (int i = 0; i < 20; ++i) ns.data.push_back(absl::StrCat("ns", id, "-", i));
      auto ids = client->Append(id, ns.data);
      ASSERT_TRUE(ids.ok()) << ids.status();
      ns.ids = *ids;
      // Truncate each namespace a different amount (namespace 1 not at all).
      const size_t cut = id - 1;
      if (cut > 0) {
        ASSERT_TRUE(client->Truncate(id, ns.ids[cut]).ok());
      }
      all.push_back(ns);
    }
    ASSERT_TRUE(client->DeleteNamespace(6).ok());
    server->Kill();  // a crash, not a clean stop
  }
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = Connect(server->address());
  EXPECT_EQ(client->GetNamespace(6).status().code(), absl::StatusCode::kNotFound);
  for (uint64_t id = 1; id <= 5; ++id) {
    const Ns& ns = all[id - 1];
    const size_t cut = id - 1;
    auto info = client->GetNamespace(id);
    ASSERT_TRUE(info.ok()) << info.status();
    if (cut > 0) {
      EXPECT_EQ(info->first_entry_id(), ns.ids[cut]) << "namespace " << id;
    } else {
      EXPECT_LE(info->first_entry_id(), ns.ids[0]) << "namespace " << id;
    }
    auto entries = client->ReadAll(id);
    ASSERT_TRUE(entries.ok()) << entries.status();
    ASSERT_EQ(entries->size(), ns.data.size() - cut) << "namespace " << id;
    for (size_t k = 0; k < entries->size(); ++k) {
      EXPECT_EQ((*entries)[k].entry_id(), ns.ids[cut + k]);
      EXPECT_EQ((*entries)[k].data(), ns.data[cut + k]);
    }
  }
  auto listed = client->ListNamespaces();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 5u);
}

}  // namespace
}  // namespace wal::testing
