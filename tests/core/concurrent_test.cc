// The core's components all at once: writers, readers, truncations, an acquisition and (on
// real Kafka) pruning, from many threads.
#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "server/meta/pruner.h"
#include "tests/core/core_fixture.h"

namespace wal::testing {
namespace {

// Writers, readers, truncations, an acquisition and (on real Kafka) pruning all at once; then
// every namespace holds exactly its acknowledged entries above its truncation point, in order.
// Over 80 lines on purpose: the threads and the final check share the record of what was
// acknowledged, and read best together.
TEST_F(Core, ConcurrentAppendsReadsTruncatesAndAcquires) {
  constexpr uint64_t kNamespaces = 6;
  constexpr int kAppendsPerNamespace = 60;

  // Creations race each other for the same metadata topic.
  {
    std::vector<std::thread> creators;
    std::atomic<int> failures{0};
    for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
      creators.emplace_back([&, ns] { failures += Create(ns).ok() ? 0 : 1; });
    }
    for (std::thread& t : creators) t.join();
    ASSERT_EQ(failures.load(), 0);
  }

  // What each namespace acknowledged: entry id -> sequence.
  std::mutex acked_mu;
  std::map<uint64_t, std::map<uint64_t, uint64_t>> acked;
  std::atomic<bool> writing{true};
  std::atomic<int> append_errors{0};
  std::atomic<int> read_errors{0};
  std::atomic<int> reads_checked{0};
  std::atomic<int> out_of_order{0};

  // One writer thread per two namespaces; batches of 1-4 entries, some split over records.
  std::vector<std::thread> writers;
  for (uint64_t first = 1; first <= kNamespaces; first += 2) {
    writers.emplace_back([&, first] {
      std::mt19937 rng(static_cast<uint32_t>(first));
      std::map<uint64_t, uint64_t> next_seq;
      for (int round = 0; round < kAppendsPerNamespace; ++round) {
        for (uint64_t ns = first; ns < first + 2; ++ns) {
          const NamespaceState state = *meta_->Get(ns);
          const int count = 1 + static_cast<int>(rng() % 4);
          std::vector<std::string> payloads;
          std::vector<AppendItem> items;
          for (int i = 0; i < count; ++i) payloads.push_back(Payload(ns, ++next_seq[ns]));
          for (int i = 0; i < count; ++i) {
            const uint64_t seq = next_seq[ns] - count + 1 + i;
            items.push_back(AppendItem{state.slot, ns, payloads[i], EntryStamp{0, first, seq}});
          }
          auto ids = Append(std::move(items));
          if (!ids.ok()) {
            ++append_errors;
            continue;
          }
          std::lock_guard lock(acked_mu);
          for (int i = 0; i < count; ++i) {
            acked[ns][(*ids)[i]] = next_seq[ns] - count + 1 + i;
          }
        }
      }
    });
  }

  // Readers join and leave the slots' shared scans while the writers run; every read returns
  // entries in id order with the payload of their namespace.
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937 rng(static_cast<uint32_t>(100 + r));
      while (writing.load()) {
        std::vector<std::pair<uint64_t, std::shared_ptr<RecordingSink>>> sinks;
        for (int i = 0; i < 4; ++i) {
          const uint64_t ns = 1 + rng() % kNamespaces;
          sinks.emplace_back(ns, StartRead(ns));
        }
        for (auto& [ns, sink] : sinks) {
          auto entries = sink->Wait(seconds(60));
          if (!entries.ok()) {
            ++read_errors;
            ADD_FAILURE() << "read of " << ns << ": " << entries.status();
            continue;
          }
          uint64_t last = 0;
          for (const v1::Entry& e : *entries) {
            if (e.entry_id() <= last && last != 0) ++out_of_order;
            last = e.entry_id();
            if (e.namespace_id() != ns || e.data() != Payload(ns, e.sequence())) ++out_of_order;
          }
          ++reads_checked;
        }
      }
    });
  }

  // Truncations of every namespace to its median acknowledged entry, while they grow (and the
  // pruner deletes below them).
  std::map<uint64_t, uint64_t> truncated_before;
  std::thread truncator([&] {
    for (int round = 0; round < 5 && writing.load(); ++round) {
      std::this_thread::sleep_for(milliseconds(200));
      for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
        uint64_t before = 0;
        {
          std::lock_guard lock(acked_mu);
          if (acked[ns].empty()) continue;
          auto mid = acked[ns].begin();
          std::advance(mid, acked[ns].size() / 2);
          before = mid->first;
        }
        auto state = meta_->Truncate(ns, static_cast<int64_t>(before), Deadline());
        ASSERT_TRUE(state.ok()) << state.status();
        truncated_before[ns] = std::max(truncated_before[ns], before);
      }
    }
  });

  // On real Kafka the pruner deletes below the lowest live first_entry_id of each slot,
  // concurrently (the mock cluster has no DeleteRecords).
  std::optional<Pruner> pruner;
  std::thread pruning;
  if (OnRealKafka()) {
    pruner.emplace(meta_, core_->admin(), slots(), seconds(3600), PruneMode::kDelete, &metrics());
    pruning = std::thread([&] {
      while (writing.load()) {
        const absl::Status s = pruner->RunOnce();
        EXPECT_TRUE(s.ok()) << s;
        std::this_thread::sleep_for(milliseconds(150));
      }
    });
  }

  for (std::thread& t : writers) t.join();
  truncator.join();
  writing = false;
  for (std::thread& t : readers) t.join();
  if (pruning.joinable()) pruning.join();
  EXPECT_EQ(append_errors.load(), 0);
  EXPECT_EQ(read_errors.load(), 0);
  EXPECT_EQ(out_of_order.load(), 0);
  EXPECT_GT(reads_checked.load(), 0);

  // Namespace 6 changes hands: its fence and one entry of the new epoch.
  auto acquired = meta_->Acquire(6, Deadline());
  ASSERT_TRUE(acquired.ok()) << acquired.status();
  auto fence_at =
      Append({AppendItem{acquired->slot, 6, {}, EntryStamp{acquired->epoch, 0, 0}, true}});
  ASSERT_TRUE(fence_at.ok()) << fence_at.status();
  ASSERT_TRUE(
      meta_
          ->RecordFence(6, Fence{acquired->epoch, static_cast<int64_t>((*fence_at)[0])}, Deadline())
          .ok());
  const std::string last_payload = Payload(6, 1000);
  auto last =
      Append({AppendItem{acquired->slot, 6, last_payload, EntryStamp{acquired->epoch, 7, 1000}}});
  ASSERT_TRUE(last.ok()) << last.status();
  acked[6][(*last)[0]] = 1000;

  // Every namespace read back whole, all at once: exactly the acknowledged entries above the
  // truncation point, in order.
  size_t acknowledged = 0;
  for (const auto& [ns, ids] : acked) acknowledged += ids.size();
  std::cerr << "RESULT core: " << acknowledged << " entries acknowledged in " << kNamespaces
            << " namespaces, " << reads_checked.load() << " concurrent reads checked, "
            << metrics().pruned_records.load() << " records pruned, " << metrics().read_scans.load()
            << " scans, " << metrics().read_scan_rewinds.load() << " rewinds\n";
  std::vector<std::shared_ptr<RecordingSink>> finals;
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) finals.push_back(StartRead(ns));
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
    auto entries = finals[ns - 1]->Wait(seconds(60));
    ASSERT_TRUE(entries.ok()) << "namespace " << ns << ": " << entries.status();
    std::vector<std::pair<uint64_t, uint64_t>> expected;
    for (const auto& [id, seq] : acked[ns]) {
      if (id >= truncated_before[ns]) expected.emplace_back(id, seq);
    }
    std::vector<std::pair<uint64_t, uint64_t>> got;
    for (const v1::Entry& e : *entries) got.emplace_back(e.entry_id(), e.sequence());
    EXPECT_EQ(got, expected) << "namespace " << ns;
    EXPECT_GE(acked[ns].size(), static_cast<size_t>(kAppendsPerNamespace));
  }
}

}  // namespace
}  // namespace wal::testing
