// Readers that stall, readers that follow and plain reads with deadlines, while writers append
// entries split over several records and walserver is killed (kill -9) and restarted every few
// seconds, so that some of its split entries are torn. Afterwards the checker reads everything
// back. WAL_SOAK_SECONDS sets the length (20 s in ./scripts/test.sh; scripts/soak.sh runs it
// for longer).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/support/checker.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kNamespaces = 4;

struct ReadCounts {
  std::atomic<uint64_t> entries{0};
  std::mutex mu;
  std::condition_variable received;            // signalled at each entry
  std::map<uint64_t, uint64_t> per_namespace;  // entries received, under mu
  // The entries received, per namespace, by the "ns/seq/" their data starts with, and the read
  // (a number per Follow call's stream) that first got each, under mu.
  std::map<uint64_t, std::map<std::string, uint64_t>> first_read_of;
  uint64_t resumed_copies = 0;               // got again by a later read, under mu
  std::atomic<uint64_t> copies_left_out{0};  // retried copies a resumed read left out
  std::vector<std::string> ended_early;      // how follow reads ended before the test did, under mu
  uint64_t duplicates = 0;                   // got twice by one read: a defect, under mu
  std::map<uint64_t, int64_t> last_id;       // the id of the last entry received, under mu
  std::atomic<uint64_t> out_of_order{0};     // an id not above the one before, within a namespace
  std::atomic<uint64_t> deadline_missed{0};
  std::atomic<uint64_t> reads{0};
};

// Follows `ns` from the start until `stop` with one read that resumes itself after each restart
// (ReadOptions::resume); with `stall`, sleeps up to 3 s now and then without pulling. Should the
// client give up on walserver, a new read starts past the last entry it got.
void Follow(const std::string& address, uint64_t ns, bool stall, uint32_t seed,
            const std::atomic<bool>& stop, ReadCounts& counts) {
  std::mt19937 rng(seed);
  ClientOptions options;
  options.target = address;
  options.max_retries = 100;  // about 3 minutes at 2 s: any restart
  auto client = Client::Connect(options);
  if (!client.ok()) return;
  int64_t last = -1;  // the id of the last entry received (ids start at 0)
  for (uint64_t read_number = 0; !stop.load(); ++read_number) {
    ReadOptions read;
    read.namespace_id = ns;
    read.start_entry_id = static_cast<uint64_t>(last + 1);
    read.follow = true;
    read.resume = true;
    auto stream = (*client)->OpenRead(read);
    std::atomic<bool> ended{false};
    // A follow read pulls until stopped: cancel it from aside when the test ends.
    std::thread canceller([&] {
      while (!stop.load() && !ended.load()) std::this_thread::sleep_for(milliseconds(50));
      stream->Cancel();
    });
    v1::Entry entry;
    while (stream->Next(&entry)) {
      if (static_cast<int64_t>(entry.entry_id()) <= last) ++counts.out_of_order;
      last = static_cast<int64_t>(entry.entry_id());
      ++counts.entries;
      {
        std::lock_guard<std::mutex> lock(counts.mu);
        ++counts.per_namespace[ns];
        const std::string& data = entry.data();
        const auto [it, first] = counts.first_read_of[ns].emplace(
            data.substr(0, data.find('/', data.find('/') + 1)), read_number);
        if (!first) ++(it->second == read_number ? counts.duplicates : counts.resumed_copies);
        counts.last_id[ns] = last;
      }
      counts.received.notify_all();
      if (stall && rng() % 200 == 0) std::this_thread::sleep_for(milliseconds(rng() % 3000));
    }
    ended = true;
    canceller.join();
    counts.copies_left_out += stream->resumed_copies();
    if (!stop.load()) {  // the client gave up resuming: the next read starts anew
      std::lock_guard<std::mutex> lock(counts.mu);
      counts.ended_early.push_back(stream->status().ToString());
    }
    if (!stop.load()) std::this_thread::sleep_for(milliseconds(100));  // walserver restarting
  }
}

// Over 80 lines on purpose: one soak (its load, its crashes, then the check of everything
// acknowledged) reads best top to bottom.
TEST(SoakTest, StallingReadersFollowersAndCrashesInsideSplitEntries) {
  const std::string brokers = TestBrokers();
  ASSERT_FALSE(brokers.empty()) << kNoKafka;
  const char* env = std::getenv("WAL_SOAK_SECONDS");
  const int soak_seconds = env != nullptr ? std::atoi(env) : 20;
  std::vector<std::string> args = KafkaServerArgs(brokers, UniqueName("soak"));
  args.push_back("--name=soak-writer");       // a restart is recognised by its origin
  args.push_back("--max_record_bytes=8192");  // entries of 20 KB: 3 records each
  auto server = ServerProcess::Start(args);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  auto admin = Connect(address, seconds(30));
  std::vector<uint64_t> namespaces;
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
    ASSERT_TRUE(admin->CreateNamespace(ns).ok());
    namespaces.push_back(ns);
  }

  Workload workload([&] { return Connect(address, seconds(10)); }, namespaces, 20000, 2);
  workload.Start();
  std::atomic<bool> stop{false};
  ReadCounts follow_counts;
  ReadCounts stall_counts;
  ReadCounts plain_counts;
  std::vector<std::thread> readers;
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
    readers.emplace_back(Follow, address, ns, false, 10 + ns, std::cref(stop),
                         std::ref(follow_counts));
    readers.emplace_back(Follow, address, ns, true, 20 + ns, std::cref(stop),
                         std::ref(stall_counts));
  }
  // Plain reads of up to 500 entries from a random point, with a 15 s deadline: each ends OK,
  // or UNAVAILABLE across a restart; never by its deadline.
  readers.emplace_back([&] {
    std::mt19937 rng(7);
    auto client = Connect(address, seconds(15));
    while (!stop.load()) {
      const uint64_t ns = 1 + rng() % kNamespaces;
      auto info = client->GetNamespace(ns);
      if (!info.ok()) continue;  // restarting
      const uint64_t span = info->next_entry_id() - info->first_entry_id();
      const uint64_t start = info->first_entry_id() + (span == 0 ? 0 : rng() % span);
      auto entries = client->ReadAll(ns, start, 500);
      ++plain_counts.reads;
      if (entries.ok()) {
        plain_counts.entries += entries->size();
      } else if (absl::IsDeadlineExceeded(entries.status())) {
        ++plain_counts.deadline_missed;
        ADD_FAILURE() << "a plain read missed its deadline: " << entries.status();
      }
    }
  });

  // The readers stop and are joined however the test leaves (an assertion returns early).
  struct JoinReaders {
    std::atomic<bool>& stop;
    std::vector<std::thread>& readers;
    ~JoinReaders() {
      stop = true;
      for (auto& t : readers) {
        if (t.joinable()) t.join();
      }
    }
  } join_readers{stop, readers};

  // kill -9 every 2-4 s, while entries are being sent.
  std::mt19937 rng(3);
  int kills = 0;
  const auto end = Clock::now() + seconds(soak_seconds);
  absl::Status restarted;
  while (Clock::now() < end && restarted.ok()) {
    std::this_thread::sleep_for(milliseconds(2000 + rng() % 2000));
    restarted = (*server)->Restart();
    ++kills;
  }
  workload.Stop();
  ASSERT_TRUE(restarted.ok()) << restarted;
  // The followers catch up with the last appends. After a restart each one finds its place by
  // reading its slot from the namespace's start, so this takes seconds on a busy machine.
  auto reader = Connect(address, seconds(60));
  std::map<uint64_t, std::vector<v1::Entry>> logs;
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
    auto log = reader->ReadAll(ns);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_FALSE(log->empty()) << "namespace " << ns;
    logs[ns] = std::move(*log);
  }
  const auto appends_stopped = Clock::now();
  bool caught_up = false;
  {
    std::unique_lock<std::mutex> lock(follow_counts.mu);
    caught_up = follow_counts.received.wait_for(lock, seconds(120), [&] {
      for (const auto& [ns, log] : logs) {
        const auto last = follow_counts.last_id.find(ns);
        if (last == follow_counts.last_id.end() ||
            last->second < static_cast<int64_t>(log.back().entry_id())) {
          return false;
        }
      }
      return true;
    });
  }
  const double catch_up_seconds =
      std::chrono::duration<double>(Clock::now() - appends_stopped).count();
  stop = true;
  for (auto& t : readers) t.join();
  for (const auto& [ns, log] : logs) {
    const auto last = follow_counts.last_id.find(ns);
    EXPECT_TRUE(caught_up) << "namespace " << ns << ": the follower reached entry "
                           << (last == follow_counts.last_id.end() ? -1 : last->second) << " of "
                           << log.back().entry_id() << " in 120 s";
  }

  const Verdict verdict = workload.Check(*reader);
  // Each entry is in the log once: every retry across the kills found its first copy.
  std::set<std::pair<std::string, int32_t>> slots;
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
    auto info = reader->GetNamespace(ns);
    ASSERT_TRUE(info.ok()) << info.status();
    slots.emplace(info->topic(), info->partition());
  }
  int written_twice = 0;
  for (const auto& [topic, partition] : slots) {
    auto copies = EntryCopies(brokers, topic, partition);
    ASSERT_TRUE(copies.ok()) << copies.status();
    for (const auto& [name, n] : *copies) {
      if (n > 1 && std::get<1>(name) != 0) ++written_twice;
    }
  }
  std::cerr << "RESULT soak: " << written_twice << " entries in the log more than once\n";
  EXPECT_EQ(written_twice, 0);
  std::cerr << "RESULT soak " << soak_seconds << " s: " << kills << " kills; " << verdict.Summary()
            << "; followers read " << follow_counts.entries << ", stalling " << stall_counts.entries
            << " (caught up " << catch_up_seconds << " s after the appends stopped)"
            << ", " << plain_counts.reads << " plain reads of " << plain_counts.entries
            << " entries; out of order " << follow_counts.out_of_order << "/"
            << stall_counts.out_of_order << "; deadlines missed " << plain_counts.deadline_missed
            << "\n";
  EXPECT_TRUE(verdict.clean()) << verdict.Summary();
  EXPECT_GT(verdict.acknowledged, 0u);
  EXPECT_GT(kills, 0);
  EXPECT_EQ(follow_counts.out_of_order, 0u);
  EXPECT_EQ(stall_counts.out_of_order, 0u);
  EXPECT_EQ(plain_counts.deadline_missed, 0u);
  EXPECT_GT(follow_counts.entries, 0u);
  EXPECT_GT(stall_counts.entries, 0u);
  // The followers (not stalling) got every entry of their namespace: none skipped. No follower
  // got an entry twice, also across the restarts its read resumed after (where a writer's
  // retry of an entry the follower had may lie past the resumption point).
  for (const auto& [ns, log] : logs) {
    EXPECT_EQ(follow_counts.first_read_of[ns].size(), log.size()) << "namespace " << ns;
  }
  for (const ReadCounts* counts : {&follow_counts, &stall_counts}) {
    // A read started anew may read a retried copy of an entry an earlier one got (the gap of
    // reads that start between the copies): resumed reads must not end.
    EXPECT_TRUE(counts->ended_early.empty())
        << "follow reads ended: " << absl::StrJoin(counts->ended_early, "; ");
    EXPECT_EQ(counts->duplicates, 0u) << "a follow read delivered an entry twice";
    EXPECT_EQ(counts->resumed_copies, 0u) << "a follower got an entry again in a later read";
  }
  std::cerr << "RESULT resumed follow reads left out "
            << follow_counts.copies_left_out + stall_counts.copies_left_out
            << " retried copies of entries they had delivered\n";
}

}  // namespace
}  // namespace wal::testing
