// Fencing and retry-safe appends with walserver processes on the real Kafka broker that
// ./scripts/test.sh starts: a region migrating between two datanodes, and random schedules of
// appends, acquisitions, truncations and walserver crashes, checked against the raw slots.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/common/namespace_key.h"
#include "server/log/record_format.h"
#include "tests/support/kafka_process_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Where the fence records of one namespace lie in its slot: offset -> epoch.
using Fences = std::map<int64_t, uint64_t>;

Fences FencesOf(const std::vector<RawRecord>& slot, uint64_t ns) {
  Fences fences;
  std::vector<PackedPart> parts;
  for (const RawRecord& r : slot) {
    std::string_view record;  // the namespace's record at this offset, if any
    if (DecodeKey(r.key.data(), r.key.size()) == ns) {
      record = r.value;
    } else if (DecodePacked(r.value, &parts).ok()) {
      for (const PackedPart& part : parts) {
        if (part.namespace_id == ns) record = part.record;
      }
    }
    auto decoded = DecodeRecord(record);
    if (decoded.ok() && decoded->header.kind == RecordKind::kFence) {
      fences[r.offset] = decoded->header.stamp.epoch;
    }
  }
  return fences;
}

// The highest epoch fenced before `offset`: entries of lower epochs there are not the
// namespace's.
uint64_t FencedBefore(const Fences& fences, int64_t offset) {
  uint64_t epoch = 0;
  for (auto it = fences.begin(); it != fences.end() && it->first < offset; ++it) {
    epoch = std::max(epoch, it->second);
  }
  return epoch;
}

class FencingTest : public KafkaProcessFixture {
 protected:
  std::unique_ptr<ServerProcess> StartServer(const std::string& name) {
    return KafkaProcessFixture::StartServer({"--name=" + name});
  }
  std::vector<v1::Entry> ReadAll(ServerProcess& server, uint64_t ns) {
    auto entries = Connect(server.address())->ReadAll(ns);
    EXPECT_TRUE(entries.ok()) << entries.status();
    return entries.ok() ? *entries : std::vector<v1::Entry>{};
  }
};

std::vector<std::string> DataOf(const std::vector<v1::Entry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.data());
  return out;
}

// Over 80 lines on purpose: one migration, told step by step in the order it happens.
TEST_F(FencingTest, RegionMigratesBetweenDatanodesWithoutLossOrDuplicates) {
  auto server_a = StartServer("datanode-a");
  auto server_b = StartServer("datanode-b");
  ASSERT_NE(server_a, nullptr);
  ASSERT_NE(server_b, nullptr);
  // Both datanodes lose the answer of every 4th append and retry it.
  LostAnswers lost_a, lost_b;
  auto a = LosingClient(server_a->address(), 4, &lost_a);
  auto b = LosingClient(server_b->address(), 4, &lost_b);
  const uint64_t ns = 7;
  auto created = a->CreateNamespace(ns);
  ASSERT_TRUE(created.ok()) << created.status();
  auto a_epoch = a->AcquireNamespace(ns);
  ASSERT_TRUE(a_epoch.ok()) << a_epoch.status();

  // Datanode A appends until it is told it lost the region.
  struct Acked {
    std::string data;
    uint64_t id;
  };
  std::vector<Acked> a_acked;
  std::atomic<int> a_count{0};
  absl::Status a_end;
  std::atomic<bool> give_up{false};  // set when a check below fails and returns early
  std::thread writer_a([&] {
    for (int i = 0; i < 100000 && !give_up; ++i) {
      const std::string data = absl::StrCat("A", i);
      auto ids = a->Append(ns, {data});
      if (!ids.ok()) {
        a_end = ids.status();
        return;
      }
      a_acked.push_back({data, (*ids)[0]});
      ++a_count;
    }
  });
  // A failed ASSERT below returns with A still appending: stop and join it rather than abort.
  struct JoinOnReturn {
    std::atomic<bool>& give_up;
    std::thread& writer;
    ~JoinOnReturn() {
      give_up = true;
      if (writer.joinable()) writer.join();
    }
  } join_a{give_up, writer_a};
  const auto fifty_by = Clock::now() + seconds(60);
  while (a_count < 50 && Clock::now() < fifty_by) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_GE(a_count, 50) << "datanode A stopped before 50 appends (its error is checked below)";

  // Datanode B takes the region over: acquire, replay, continue.
  auto b_epoch = b->AcquireNamespace(ns);
  ASSERT_TRUE(b_epoch.ok()) << b_epoch.status();
  EXPECT_GT(b_epoch->epoch, a_epoch->epoch);
  auto replay = b->ReadAll(ns);
  ASSERT_TRUE(replay.ok()) << replay.status();
  std::vector<std::string> b_data;
  for (int i = 0; i < 50; ++i) {
    b_data.push_back(absl::StrCat("B", i));
    auto ids = b->Append(ns, {b_data.back()});
    ASSERT_TRUE(ids.ok()) << ids.status();
  }
  writer_a.join();
  EXPECT_EQ(a_end.code(), absl::StatusCode::kFailedPrecondition) << a_end;

  // The checker's view, from the raw slot: the fence of B's epoch.
  auto slot = ReadSlotRaw(brokers_, created->ns.topic(), created->ns.partition());
  ASSERT_TRUE(slot.ok()) << slot.status();
  const Fences fences = FencesOf(*slot, ns);
  int64_t fence = -1;
  for (const auto& [offset, epoch] : fences) {
    if (epoch == b_epoch->epoch) fence = offset;
  }
  ASSERT_GE(fence, 0) << "no fence record of epoch " << b_epoch->epoch << " in the slot";

  // Expected: every acknowledged A entry before the fence, in order, then B's entries.
  std::vector<std::string> a_before;
  int zombie_acks = 0;
  for (const Acked& acked : a_acked) {
    if (static_cast<int64_t>(acked.id) < fence) {
      a_before.push_back(acked.data);
    } else {
      ++zombie_acks;  // A's walserver had not heard of B's epoch yet: readers ignore these
    }
  }
  for (ServerProcess* server : {server_a.get(), server_b.get()}) {
    const std::vector<std::string> all = DataOf(ReadAll(*server, ns));
    ASSERT_GE(all.size(), a_before.size() + b_data.size());
    // A's part may end with the entry whose answer was lost and whose retry was refused: it
    // was written before the fence, so it belongs to the log (its outcome was unknown to A).
    const size_t a_part = all.size() - b_data.size();
    EXPECT_LE(a_part, a_before.size() + 1);
    EXPECT_EQ(std::vector<std::string>(all.begin(), all.begin() + a_before.size()), a_before);
    for (size_t i = 0; i < a_part; ++i) EXPECT_EQ(all[i], absl::StrCat("A", i));
    EXPECT_EQ(std::vector<std::string>(all.begin() + a_part, all.end()), b_data);
    // B's replay saw exactly A's part.
    EXPECT_EQ(DataOf(*replay), std::vector<std::string>(all.begin(), all.begin() + a_part));
  }
  EXPECT_GT(lost_a.count + lost_b.count, 0) << "answers must really have been lost";
  std::cerr << "RESULT migration: A acknowledged " << a_acked.size() << " (" << a_before.size()
            << " before the fence, " << zombie_acks << " after it and ignored), B acknowledged "
            << b_data.size() << ", answers lost and retried " << lost_a.count + lost_b.count
            << ", lost 0, duplicated 0, reordered 0\n";
}

// One append as the load generator saw it.
struct Attempt {
  uint64_t ns = 0;
  std::string data;
  uint64_t epoch = 0;
  bool acked = false;
  uint64_t id = 0;  // when acked
};

// Over 80 lines on purpose: one random schedule and its check against the raw slots read
// best top to bottom.
TEST_F(FencingTest, RandomSchedulesKeepEveryAcknowledgedEntryExactlyOnce) {
  const char* seconds_env = std::getenv("WAL_FENCING_SECONDS");
  const int run_seconds = seconds_env ? std::atoi(seconds_env) : 30;
  const uint32_t seed = std::random_device{}();
  std::cerr << "seed " << seed << ", " << run_seconds << " s\n";
  std::vector<std::unique_ptr<ServerProcess>> servers;
  servers.push_back(StartServer("random-0"));
  servers.push_back(StartServer("random-1"));
  ASSERT_NE(servers[0], nullptr);
  ASSERT_NE(servers[1], nullptr);
  constexpr int kNamespaces = 4;
  constexpr int kDatanodes = 4;
  {
    auto c = Connect(servers[0]->address());
    for (uint64_t ns = 1; ns <= kNamespaces; ++ns) ASSERT_TRUE(c->CreateNamespace(ns).ok());
  }

  std::mutex mu;
  std::vector<Attempt> attempts;
  std::atomic<int> acquisitions{0}, truncations{0}, fenced_refusals{0}, restarts{0};
  std::atomic<bool> stop{false};
  std::vector<LostAnswers> lost(kDatanodes);
  std::vector<std::thread> datanodes;
  const auto truncate_until = std::chrono::steady_clock::now() + seconds(run_seconds / 2);
  for (int d = 0; d < kDatanodes; ++d) {
    datanodes.emplace_back([&, d] {
      std::mt19937 rng(seed + d);
      ClientOptions options;
      options.timeout = seconds(60);
      auto client = LosingClient(servers[d % 2]->address(), 5, &lost[d], options);
      int counter = 0;
      while (!stop) {
        const uint64_t ns = 1 + rng() % kNamespaces;
        auto acquired = client->AcquireNamespace(ns);
        if (!acquired.ok()) continue;  // e.g. its walserver is restarting
        ++acquisitions;
        std::vector<uint64_t> my_ids;
        const int appends = 5 + rng() % 25;
        for (int i = 0; i < appends && !stop; ++i) {
          std::vector<std::string> batch;
          for (int k = 0, n = 1 + rng() % 3; k < n; ++k) {
            batch.push_back(absl::StrCat("d", d, "-", counter++));
          }
          auto ids = client->Append(ns, batch);
          {
            std::lock_guard<std::mutex> lock(mu);
            for (size_t k = 0; k < batch.size(); ++k) {
              attempts.push_back(
                  Attempt{ns, batch[k], acquired->epoch, ids.ok(), ids.ok() ? (*ids)[k] : 0});
            }
          }
          if (ids.ok()) my_ids.insert(my_ids.end(), ids->begin(), ids->end());
          if (absl::IsFailedPrecondition(ids.status())) {
            ++fenced_refusals;
            break;  // another datanode took the region
          }
        }
        // Now and then a flush: truncate before one of our first entries. Only in the first
        // half of the run, so that the entries of the second half all stay to be checked.
        if (!my_ids.empty() && rng() % 8 == 0 &&
            std::chrono::steady_clock::now() < truncate_until) {
          if (client->Truncate(ns, my_ids[rng() % (my_ids.size() / 4 + 1)]).ok()) ++truncations;
        }
      }
    });
  }
  // Crashes: every few seconds one walserver is killed with SIGKILL and started again.
  std::mt19937 chaos(seed);
  const auto end = std::chrono::steady_clock::now() + seconds(run_seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(3000 + chaos() % 3000));
    if (std::chrono::steady_clock::now() >= end) break;
    const absl::Status restarted = servers[chaos() % 2]->Restart();
    EXPECT_TRUE(restarted.ok()) << restarted;  // the datanodes stop and join below either way
    if (!restarted.ok()) break;
    ++restarts;
  }
  stop = true;
  for (auto& t : datanodes) t.join();

  // The checker.
  int acked = 0, lost_entries = 0, duplicated = 0, reordered = 0, fenced_returned = 0, phantom = 0,
      truncated_returned = 0, zombie_acks = 0, truncated_acks = 0, read_entries = 0;
  auto admin = Connect(servers[0]->address());
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
    auto info = admin->GetNamespace(ns);
    ASSERT_TRUE(info.ok()) << info.status();
    auto slot = ReadSlotRaw(brokers_, info->topic(), info->partition());
    ASSERT_TRUE(slot.ok()) << slot.status();
    const Fences fences = FencesOf(*slot, ns);
    const std::vector<v1::Entry> read = ReadAll(*servers[0], ns);
    const std::vector<v1::Entry> read_other = ReadAll(*servers[1], ns);
    EXPECT_EQ(DataOf(read), DataOf(read_other)) << "both walservers must return the same log";
    read_entries += read.size();

    std::map<std::string, const Attempt*> tried;
    for (const Attempt& a : attempts) {
      if (a.ns == ns) tried[a.data] = &a;
    }
    std::set<std::string> seen;
    uint64_t last_id = 0;
    for (const v1::Entry& e : read) {
      if (!seen.insert(e.data()).second) ++duplicated;
      if (e.entry_id() <= last_id && last_id != 0) ++reordered;
      last_id = e.entry_id();
      auto it = tried.find(e.data());
      if (it == tried.end() || it->second->epoch != e.epoch()) ++phantom;
      if (e.epoch() < FencedBefore(fences, static_cast<int64_t>(e.entry_id()))) ++fenced_returned;
      if (e.entry_id() < info->first_entry_id()) ++truncated_returned;
    }
    for (const auto& [data, a] : tried) {
      if (!a->acked) continue;
      ++acked;
      if (a->id < info->first_entry_id()) {
        ++truncated_acks;  // truncated by a flush: not required any more
      } else if (a->epoch < FencedBefore(fences, static_cast<int64_t>(a->id))) {
        ++zombie_acks;  // acknowledged to a writer already fenced: readers ignore it
      } else if (!seen.count(data)) {
        ++lost_entries;
        ADD_FAILURE() << "acknowledged entry " << data << " at " << a->id << " of namespace " << ns
                      << " is missing";
      }
    }
  }
  int lost_answers = 0;
  for (const auto& l : lost) lost_answers += l.count;
  std::cerr << "RESULT random: " << run_seconds << " s, " << restarts << " walserver kills, "
            << acquisitions << " acquisitions, " << fenced_refusals << " fenced refusals, "
            << truncations << " truncations, " << lost_answers << " answers lost and retried; "
            << "acknowledged " << acked << " (" << truncated_acks << " truncated later, "
            << zombie_acks << " to fenced writers), read " << read_entries << "; lost "
            << lost_entries << ", duplicated " << duplicated << ", reordered " << reordered
            << ", fenced returned " << fenced_returned << ", phantom " << phantom
            << ", truncated returned " << truncated_returned << "\n";
  EXPECT_EQ(lost_entries, 0);
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(reordered, 0);
  EXPECT_EQ(fenced_returned, 0);
  EXPECT_EQ(phantom, 0);
  EXPECT_EQ(truncated_returned, 0);
  // The schedule must really have exercised what it claims to.
  EXPECT_GT(acked, 300);
  EXPECT_GE(restarts, 3);
  EXPECT_GT(acquisitions, kDatanodes);
  EXPECT_GT(lost_answers, 0);
}

}  // namespace
}  // namespace wal::testing
