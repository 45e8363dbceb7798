// Physical pruning on the real Kafka broker that ./scripts/test.sh starts: random creates,
// appends, truncates and deletes through two pruning walservers never delete a record of an
// entry that was not truncated, and records Kafka lost on its own are DATA_LOSS.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/kafka/admin.h"
#include "server/kafka/client.h"
#include "tests/support/kafka_process_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

class PruningTest : public KafkaProcessFixture {
 protected:
  void SetUp() override {
    KafkaProcessFixture::SetUp();
    auto admin = NewKafkaClient(RD_KAFKA_PRODUCER, {{"bootstrap.servers", brokers_}});
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = std::move(*admin);
  }
  // All namespaces share one slot, so that they prune each other's records.
  std::unique_ptr<ServerProcess> StartServer(const std::string& name, int prune_interval_ms) {
    return KafkaProcessFixture::StartServer(
        {"--topic_count=1", "--partitions_per_topic=1",
         absl::StrCat("--prune_interval_ms=", prune_interval_ms), "--name=" + name});
  }
  // A walserver that does not prune, and its namespace 1 holding "entry 0" .. "entry 9" (ids_).
  void StartWithTenEntries(const std::string& name) {
    server_ = StartServer(name, 0);
    ASSERT_NE(server_, nullptr);
    client_ = Connect(server_->address());
    ASSERT_TRUE(client_->CreateNamespace(1).ok());
    std::vector<std::string> data;
    for (int i = 0; i < 10; ++i) data.push_back(absl::StrCat("entry ", i));
    auto ids = client_->Append(1, data);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ids_ = *ids;
  }
  Watermarks Marks() {
    auto marks = QueryWatermarks(admin_.get(), Slot{prefix_ + "_0", 0},
                                 Clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(marks.ok()) << marks.status();
    return marks.ok() ? *marks : Watermarks{};
  }
  KafkaHandle admin_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
  std::vector<uint64_t> ids_;
};

// The model of one namespace, as the load generator saw it.
struct Model {
  std::map<uint64_t, std::string> acked;  // entry id -> data
  uint64_t truncated_before = 0;
  bool deleted = false;
};

// Over 80 lines on purpose: random operations and their check against the model read best
// top to bottom.
TEST_F(PruningTest, RandomOperationsNeverPruneAnEntryThatWasNotTruncated) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  servers.push_back(StartServer("pruner-0", 300));
  servers.push_back(StartServer("pruner-1", 300));
  ASSERT_NE(servers[0], nullptr);
  ASSERT_NE(servers[1], nullptr);
  std::vector<std::unique_ptr<Client>> clients;
  for (auto& s : servers) clients.push_back(Connect(s->address()));

  const uint32_t seed = std::random_device{}();
  std::cerr << "seed " << seed << "\n";
  std::mt19937 rng(seed);
  std::map<uint64_t, Model> model;
  uint64_t next_id = 1;
  int creates = 0, appends = 0, truncates = 0, deletes = 0, checks = 0, read_errors = 0;
  const auto check = [&](const char* when) {
    ++checks;
    for (const auto& [id, m] : model) {
      if (m.deleted) continue;
      auto read = clients[rng() % 2]->ReadAll(id);
      if (!read.ok()) {
        ++read_errors;
        ADD_FAILURE() << when << ": reading namespace " << id << ": " << read.status();
        continue;
      }
      std::map<uint64_t, std::string> got;
      for (const auto& e : *read) got[e.entry_id()] = e.data();
      std::map<uint64_t, std::string> want(m.acked.lower_bound(m.truncated_before), m.acked.end());
      EXPECT_EQ(got, want) << when << ": namespace " << id;
    }
  };

  const auto end = std::chrono::steady_clock::now() + seconds(20);
  auto next_check = std::chrono::steady_clock::now() + seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    Client& c = *clients[rng() % 2];
    std::vector<uint64_t> live;
    for (const auto& [id, m] : model) {
      if (!m.deleted) live.push_back(id);
    }
    const int op = rng() % 100;
    if (live.size() < 3 || op < 10) {
      const uint64_t id = next_id++;
      auto created = c.CreateNamespace(id);
      ASSERT_TRUE(created.ok()) << created.status();
      model[id];
      ++creates;
    } else if (op < 75) {
      const uint64_t id = live[rng() % live.size()];
      std::vector<std::string> batch;
      for (int k = 0, n = 1 + rng() % 5; k < n; ++k) {
        batch.push_back(absl::StrCat("ns ", id, " entry ", model[id].acked.size() + k));
      }
      auto ids = c.Append(id, batch);
      ASSERT_TRUE(ids.ok()) << ids.status();
      for (size_t k = 0; k < batch.size(); ++k) model[id].acked[(*ids)[k]] = batch[k];
      ++appends;
    } else if (op < 95) {
      const uint64_t id = live[rng() % live.size()];
      Model& m = model[id];
      if (m.acked.empty()) continue;
      auto it = m.acked.begin();
      std::advance(it, rng() % m.acked.size());
      // Sometimes past the last entry: everything so far is flushed.
      const uint64_t to = rng() % 4 == 0 ? m.acked.rbegin()->first + 1 : it->first;
      auto truncated = c.Truncate(id, to);
      ASSERT_TRUE(truncated.ok()) << truncated.status();
      m.truncated_before = std::max(m.truncated_before, to);
      ++truncates;
    } else {
      const uint64_t id = live[rng() % live.size()];
      ASSERT_TRUE(c.DeleteNamespace(id).ok());
      model[id].deleted = true;
      ++deletes;
    }
    if (std::chrono::steady_clock::now() >= next_check) {
      check("during the run");
      next_check = std::chrono::steady_clock::now() + seconds(2);
    }
  }
  // Let both pruners run a few more rounds, then check everything once more.
  std::this_thread::sleep_for(seconds(2));
  check("at the end");
  const Watermarks marks = Marks();
  int below_low = 0;
  uint64_t lowest_needed = UINT64_MAX;
  for (const auto& [id, m] : model) {
    if (m.deleted) continue;
    for (auto it = m.acked.lower_bound(m.truncated_before); it != m.acked.end(); ++it) {
      lowest_needed = std::min(lowest_needed, it->first);
      if (static_cast<int64_t>(it->first) < marks.low) ++below_low;
    }
  }
  std::cerr << "RESULT pruning: " << creates << " creates, " << appends << " appends, " << truncates
            << " truncates, " << deletes << " deletes, " << checks << " full read checks; slot "
            << marks.low << ".." << marks.high << " (records pruned: " << marks.low
            << "); entries not truncated below the low "
            << "watermark: " << below_low << ", read errors: " << read_errors << "\n";
  EXPECT_EQ(below_low, 0);
  EXPECT_GT(marks.low, 0) << "nothing was pruned: the test proves nothing";
  EXPECT_GT(checks, 3);
}

TEST_F(PruningTest, RecordsKafkaLostAreDataLossNeverSilence) {
  ASSERT_NO_FATAL_FAILURE(StartWithTenEntries("loser"));
  // Kafka deletes records by itself (as retention set on the topic by hand would): walserver
  // never pruned there, so it must say so.
  auto low = DeleteRecordsBefore(admin_.get(), Slot{prefix_ + "_0", 0}, ids_[5],
                                 Clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(low.ok()) << low.status();
  auto read = client_->ReadAll(1);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  // From the first record still there, the rest reads normally.
  auto rest = client_->ReadAll(1, ids_[5]);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->size(), 5u);
  // With skip_lost, the read says what is gone and goes on: the recovery a datanode in a crash
  // loop on this namespace needs.
  std::vector<std::string> got;
  ReadOptions skip;
  skip.namespace_id = 1;
  skip.skip_lost = true;
  skip.on_gap = [&](const v1::Gap& gap) {
    EXPECT_EQ(gap.reason(), v1::Gap::LOST);
    EXPECT_LE(gap.from_entry_id(), ids_[0]);
    EXPECT_EQ(gap.to_entry_id(), ids_[5]);
    EXPECT_NE(gap.message().find("gone from Kafka"), std::string::npos) << gap.message();
    got.push_back("gap");
  };
  ASSERT_TRUE(client_
                  ->Read(skip,
                         [&](v1::Entry& e) {
                           got.push_back(e.data());
                           return true;
                         })
                  .ok());
  EXPECT_EQ(got, (std::vector<std::string>{"gap", "entry 5", "entry 6", "entry 7", "entry 8",
                                           "entry 9"}));
  // A read from a time before the gap is no way around it: Kafka's time index starts at the
  // records still there, and the read still says what is gone.
  ReadOptions from_time;
  from_time.namespace_id = 1;
  from_time.start_time_ms = 1;
  EXPECT_EQ(client_->Read(from_time, [](v1::Entry&) { return true; }).code(),
            absl::StatusCode::kDataLoss);
  got.clear();
  skip.start_time_ms = 1;
  ASSERT_TRUE(client_
                  ->Read(skip,
                         [&](v1::Entry& e) {
                           got.push_back(e.data());
                           return true;
                         })
                  .ok());
  EXPECT_EQ(got.size(), 6u);
  EXPECT_EQ(got.front(), "gap");
  // Truncating past the gap makes the namespace whole again.
  ASSERT_TRUE(client_->Truncate(1, ids_[5]).ok());
  auto after = client_->ReadAll(1);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->front().data(), "entry 5");
}

TEST_F(PruningTest, AReadOfTheSlotEndsANamespaceWhoseRecordsKafkaLostWithDataLoss) {
  ASSERT_NO_FATAL_FAILURE(StartWithTenEntries("slot_loser"));
  ASSERT_TRUE(client_->CreateNamespace(2).ok());
  auto ids_of_2 = client_->Append(2, {"two"});
  ASSERT_TRUE(ids_of_2.ok()) << ids_of_2.status();
  // Namespace 3 truncated everything it had below the loss: it reads on from its first entry.
  ASSERT_TRUE(client_->CreateNamespace(3).ok());
  ASSERT_TRUE(client_->Append(3, {"gone"}).ok());
  auto ids_of_3 = client_->Append(3, {"three"});
  ASSERT_TRUE(ids_of_3.ok()) << ids_of_3.status();
  ASSERT_TRUE(client_->Truncate(3, (*ids_of_3)[0]).ok());
  auto low = DeleteRecordsBefore(admin_.get(), Slot{prefix_ + "_0", 0}, (*ids_of_3)[0],
                                 Clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(low.ok()) << low.status();
  ReadManyOptions options;
  options.slot = ReadManyOptions::SlotStart{prefix_ + "_0", 0, 0};
  std::map<uint64_t, std::vector<std::string>> data;
  std::map<uint64_t, v1::ReadEnd> ends;
  absl::Status status = client_->ReadMany(
      options,
      [&](v1::Entry& e) {
        data[e.namespace_id()].push_back(e.data());
        return true;
      },
      [&](const v1::ReadEnd& end) {
        ends[end.namespace_id()] = end;
        return true;
      });
  ASSERT_TRUE(status.ok()) << status;
  for (uint64_t lost : {1, 2}) {
    EXPECT_EQ(ends[lost].code(), grpc::StatusCode::DATA_LOSS)
        << lost << ": " << ends[lost].message();
    EXPECT_EQ(data.count(lost), 0u);
  }
  EXPECT_EQ(ends[3].code(), 0) << ends[3].message();
  EXPECT_EQ(data[3], std::vector<std::string>{"three"});
}

// An idle namespace that truncated everything it had holds nothing back: the slot is pruned up
// to the first entry a namespace still needs, past the idle one's truncation point.
TEST_F(PruningTest, AnIdleNamespaceDoesNotHoldItsSlotBack) {
  auto server = StartServer("idle", 100);
  ASSERT_NE(server, nullptr);
  auto client = Connect(server->address());
  for (uint64_t ns : {1, 2, 3}) ASSERT_TRUE(client->CreateNamespace(ns).ok());
  // 1 wrote two entries and truncated both, long ago; 3 has one entry it still needs; 2 goes on
  // writing and truncating behind itself.
  ASSERT_TRUE(client->Append(1, {"a", "b"}).ok());
  ASSERT_TRUE(client->Truncate(1, client->GetNamespace(1)->next_entry_id()).ok());
  auto kept = client->Append(3, {"keep"});
  ASSERT_TRUE(kept.ok()) << kept.status();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client->Append(2, {absl::StrCat("busy ", i)}).ok());
  ASSERT_TRUE(client->Truncate(2, client->GetNamespace(2)->next_entry_id()).ok());
  // Pruned up to 3's entry: below it, neither 1 (nothing past its truncation point) nor 3 (whose
  // first entry id is its start, below its entry) needs anything.
  const int64_t want = static_cast<int64_t>((*kept)[0]);
  const auto deadline = Clock::now() + seconds(30);
  while (Marks().low < want && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(Marks().low, want);
  // Nothing readable was lost: 1 and 2 read empty, 3 its entry; 1 writes again and reads it.
  for (uint64_t ns : {1, 2}) {
    auto read = client->ReadAll(ns);
    ASSERT_TRUE(read.ok()) << ns << ": " << read.status();
    EXPECT_TRUE(read->empty());
  }
  auto read = client->ReadAll(3);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ(read->front().data(), "keep");
  // So does a read of the whole slot from its start, below what was pruned.
  ReadManyOptions whole;
  whole.slot = ReadManyOptions::SlotStart{prefix_ + "_0", 0, 0};
  std::vector<std::string> data;
  std::map<uint64_t, int> codes;
  ASSERT_TRUE(client
                  ->ReadMany(
                      whole,
                      [&](v1::Entry& e) {
                        data.push_back(e.data());
                        return true;
                      },
                      [&](const v1::ReadEnd& end) {
                        codes[end.namespace_id()] = end.code();
                        return true;
                      })
                  .ok());
  EXPECT_EQ(data, std::vector<std::string>{"keep"});
  // 2 truncated up to the end: nothing of it below the end, so it is left out.
  EXPECT_EQ(codes, (std::map<uint64_t, int>{{1, 0}, {3, 0}}));
  ASSERT_TRUE(client->Append(1, {"again"}).ok());
  read = client->ReadAll(1);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ(read->front().data(), "again");
}

// The slot's topic deleted and made again, with a prune point recorded for the old topic past
// what the new one's namespaces need: the new topic is pruned up to its own namespaces' point
// only. Deleting up to the old point would take the new namespaces' entries, and reads would
// take their records missing below that point as pruned.
TEST_F(PruningTest, ATopicMadeAgainIsNotPrunedUpToTheOldTopicsPoint) {
  auto server = StartServer("remade", 100);
  ASSERT_NE(server, nullptr);
  auto client = Connect(server->address());
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  ASSERT_TRUE(client->Append(1, std::vector<std::string>(40, "old")).ok());
  const uint64_t old_point = client->GetNamespace(1)->next_entry_id();
  ASSERT_TRUE(client->Truncate(1, old_point).ok());
  auto deadline = Clock::now() + seconds(30);
  while (Marks().low < static_cast<int64_t>(old_point) && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_EQ(Marks().low, static_cast<int64_t>(old_point)) << "the old topic was not pruned";

  ASSERT_NO_FATAL_FAILURE(DeleteTopic(admin_.get(), prefix_ + "_0"));
  ASSERT_TRUE(server->Restart().ok()) << "walserver makes its topics again as it starts";
  client = Connect(server->address());
  ASSERT_TRUE(client->CreateNamespace(2).ok());
  std::vector<std::string> data;
  for (int i = 0; i < 60; ++i) data.push_back(absl::StrCat("new ", i));
  auto ids = client->Append(2, data);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GT(ids->back(), old_point) << "the new topic must reach past the old point";
  // 2 truncates its first 5 entries: pruned up to its 6th, and no further.
  const int64_t want = static_cast<int64_t>((*ids)[5]);
  ASSERT_TRUE(client->Truncate(2, (*ids)[5]).ok());
  deadline = Clock::now() + seconds(30);
  while (Marks().low < want && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(Marks().low, want);
  auto read = client->ReadAll(2);
  ASSERT_TRUE(read.ok()) << read.status();
  std::vector<std::string> got;
  for (const auto& e : *read) got.push_back(e.data());
  EXPECT_EQ(got, std::vector<std::string>(data.begin() + 5, data.end()));
}

TEST_F(PruningTest, RetentionSetOnTheTopicByHandIsDataLoss) {
  ASSERT_NO_FATAL_FAILURE(StartWithTenEntries("retention"));
  // An operator shortens the slot topic's retention with kafka-configs, and Kafka deletes the
  // entries (the active segment too, once all of it is past retention); then sets it back.
  auto set_retention = [&](const std::string& settings) {
    const std::string command =
        absl::StrCat(KAFKA_SH, " topic-config ", brokers_, " ", prefix_, "_0 ", settings, " >&2");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  };
  set_retention("retention.ms=1000");
  const auto start = Clock::now();
  // Every record: the one that begins the slot and the ten entries.
  const int64_t end = static_cast<int64_t>(ids_.back()) + 1;
  while (Marks().low < end && Clock::now() < start + seconds(60)) {
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_EQ(Marks().low, end) << "retention did not delete the entries";
  std::cerr << "retention deleted the entries after "
            << std::chrono::duration_cast<milliseconds>(Clock::now() - start).count() << " ms\n";
  set_retention("retention.ms=-1");
  auto kept = client_->Append(1, {"entry 10"});
  ASSERT_TRUE(kept.ok()) << kept.status();

  auto read = client_->ReadAll(1);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_NE(read.status().message().find("gone from Kafka"), absl::string_view::npos)
      << read.status();
  auto rest = client_->ReadAll(1, (*kept)[0]);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->size(), 1u);
  EXPECT_EQ(rest->front().data(), "entry 10");
}

TEST_F(PruningTest, ANamespaceCreatedWhilePruningIsReadable) {
  // Many creations racing with a pruner that runs all the time: a new namespace's start may lie
  // below what the pruner deletes (it had nothing there), and reads must not call that loss.
  auto server = StartServer("racer", 50);
  ASSERT_NE(server, nullptr);
  auto client = Connect(server->address());
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  for (uint64_t id = 2; id < 60; ++id) {
    ASSERT_TRUE(client->Append(id - 1, {"x", "y"}).ok());
    ASSERT_TRUE(client->Truncate(id - 1, client->GetNamespace(id - 1)->next_entry_id()).ok());
    ASSERT_TRUE(client->CreateNamespace(id).ok());
    std::this_thread::sleep_for(milliseconds(rand() % 60));
    auto read = client->ReadAll(id);
    ASSERT_TRUE(read.ok()) << "namespace " << id << ": " << read.status();
    EXPECT_TRUE(read->empty());
  }
  EXPECT_GT(Marks().low, 0);
}

// --prune_mode=auto on a cluster that refuses DeleteRecords: cleanup.policy=compact makes Kafka
// answer POLICY_VIOLATION, as a managed service without DeleteRecords or an ACL would refuse.
TEST_F(PruningTest, AutoModeTurnsLogicalWhenKafkaRefusesDeleteRecords) {
  // Two walservers on the same slot, one in each mode. Started before the policy changes:
  // walserver refuses at start topics made with other settings.
  const auto start_server = [&](const std::string& mode) {
    ServerOptions options = InProcessOneSlotOptions();
    options.prune_interval = milliseconds(200);
    options.prune_mode = mode;
    auto server = WalServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  };
  auto server = start_server("auto");
  ASSERT_NE(server, nullptr);
  auto deleting = start_server("delete");
  ASSERT_NE(deleting, nullptr);
  const std::string command = absl::StrCat(KAFKA_SH, " topic-config ", brokers_, " ", prefix_,
                                           "_0 cleanup.policy=compact >&2");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  auto client = Connect(server->address());
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  auto ids = client->Append(1, {"a", "b", "c", "d"});
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_TRUE(client->Truncate(1, (*ids)[2]).ok());

  // The first refusal switches auto to logical pruning, once: no attempt every round after.
  const auto deadline = Clock::now() + seconds(20);
  while (server->metrics().prune_logical.load() == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_EQ(server->metrics().prune_logical.load(), 1) << "auto never went logical";
  std::this_thread::sleep_for(seconds(2));  // about ten rounds
  EXPECT_EQ(server->metrics().prune_refusals.load(), 1u);
  const std::string metrics = server->metrics().Render();
  EXPECT_NE(metrics.find("walserver_prune_logical 1"), std::string::npos) << metrics;
  // delete keeps trying, and reports each refusal.
  EXPECT_GE(deleting->metrics().prune_refusals.load(), 3u);
  EXPECT_EQ(deleting->metrics().prune_logical.load(), 0);
  // Truncation still holds (logically), and nothing was deleted.
  auto read = client->ReadAll(1);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ(read->front().data(), "c");
  // No entry's record was deleted (the record that begins the slot may have been, before the
  // policy changed).
  EXPECT_LE(Marks().low, static_cast<int64_t>((*ids)[0]));
}

}  // namespace
}  // namespace wal::testing
