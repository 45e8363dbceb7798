// The reader (log/entry_reader.h): shared scans joined late, stalled and slow clients,
// truncation under a follower, and incomplete entries.
#include <atomic>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/common/namespace_key.h"
#include "server/log/record_format.h"
#include "tests/core/core_fixture.h"

namespace wal::testing {
namespace {

// A read arriving after the slot's scan passed its start joins that scan (which goes back for
// it) instead of scanning the slot again, and both reads get every entry once, in order.
TEST_F(Core, AReadJoiningBehindARunningScanGetsEveryEntryOnce) {
  const auto [a, b] = TwoInOneSlot(1);
  ASSERT_NE(a, 0u);
  const std::vector<uint64_t> pair = {a, b};
  const Slot slot = meta_->Get(pair[0])->slot;
  std::map<uint64_t, std::vector<uint64_t>> acked;
  for (uint64_t seq = 1; seq <= 300; ++seq) {
    // 1 KiB entries: the slow read's 300 KiB take ~75 batches.
    const std::string padding(1000, 'p');
    std::vector<std::string> payloads = {Payload(pair[0], seq) + padding,
                                         Payload(pair[1], seq) + padding};
    auto ids = Append({AppendItem{slot, pair[0], payloads[0], EntryStamp{0, 1, seq}},
                       AppendItem{slot, pair[1], payloads[1], EntryStamp{0, 2, seq}}});
    ASSERT_TRUE(ids.ok()) << ids.status();
    acked[pair[0]].push_back((*ids)[0]);
    acked[pair[1]].push_back((*ids)[1]);
  }
  const uint64_t scans_before = metrics().read_scans.load();
  // The first read follows, so its scan stays. The second read starts once the first has all
  // its entries, so the scan has passed the second one's start.
  auto first = std::make_shared<RecordingSink>();
  ReadParams params;
  params.namespace_id = pair[0];
  params.follow = true;
  params.deadline = Clock::now() + seconds(5);
  ASSERT_TRUE(reader_->Start(params, first).ok());
  first->WaitForEntries(acked[pair[0]].size(), seconds(4));
  auto late = StartRead(pair[1]);
  for (auto [ns, sink] : {std::pair{pair[0], first}, std::pair{pair[1], late}}) {
    auto entries = sink->Wait(seconds(60));
    if (ns == pair[0]) {  // the follow read ends at its deadline
      ASSERT_TRUE(absl::IsDeadlineExceeded(entries.status())) << entries.status();
      entries = sink->entries();
    }
    ASSERT_TRUE(entries.ok()) << entries.status();
    std::vector<uint64_t> got;
    for (const v1::Entry& e : *entries) {
      got.push_back(e.entry_id());
      EXPECT_EQ(e.data(), Payload(ns, e.sequence()) + std::string(1000, 'p'));
    }
    EXPECT_EQ(got, acked[ns]) << "namespace " << ns;
  }
  EXPECT_EQ(metrics().read_scans.load() - scans_before, 1u);
  EXPECT_GE(metrics().read_scan_rewinds.load(), 1u);
}

// The slot index (server/log/slot_index.h): once a replay of a big namespace scanned its slot,
// a read of a small namespace of the same slot fetches its own records and goes past the rest.
TEST_F(Core, ASmallNamespaceBehindABigOneCostsOnlyItsOwnRecordsOnceTheSlotIsIndexed) {
  const auto [small, big] = TwoInOneSlot(1);
  ASSERT_NE(small, 0u);
  const Slot slot = meta_->Get(small)->slot;
  const std::string padding(1000, 'p');
  std::vector<uint64_t> small_ids;
  uint64_t small_bytes = 0;
  uint64_t big_entries = 0;
  for (uint64_t round = 1; round <= 3; ++round) {
    auto id = Append({AppendItem{slot, small, Payload(small, round), EntryStamp{0, 1, round}}});
    ASSERT_TRUE(id.ok()) << id.status();
    small_ids.push_back((*id)[0]);
    small_bytes += Payload(small, round).size();
    if (round == 3) break;
    for (int call = 0; call < 20; ++call) {
      std::vector<AppendItem> items;
      for (int i = 0; i < 100; ++i) {
        ++big_entries;
        items.push_back(AppendItem{slot, big, padding, EntryStamp{0, 2, big_entries}});
      }
      ASSERT_TRUE(Append(std::move(items)).ok());
    }
  }
  auto replayed = StartRead(big)->Wait(seconds(60));
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  ASSERT_EQ(replayed->size(), big_entries);

  const uint64_t scanned_before = metrics().read_scanned_bytes.load();
  const uint64_t skips_before = metrics().read_index_skips.load();
  auto entries = StartRead(small)->Wait(seconds(60));
  ASSERT_TRUE(entries.ok()) << entries.status();
  std::vector<uint64_t> got;
  for (const v1::Entry& e : *entries) got.push_back(e.entry_id());
  EXPECT_EQ(got, small_ids);
  // Its own records (five, with their headers), not the 4,000 of 1 KiB of the other namespace
  // between them.
  EXPECT_LE(metrics().read_scanned_bytes.load() - scanned_before, small_bytes + 5 * 100u);
  EXPECT_EQ(metrics().read_index_skips.load() - skips_before, 2u);
}

// One read whose client stops pulling does not hold up the other reads of its slot: it is
// detached from the shared scan once its queue is full, and carries on by itself (from where it
// stood, nothing lost or repeated) once its client pulls again.
TEST_F(Core, AStalledReadDoesNotHoldUpTheOtherReadsOfItsSlot) {
  ASSERT_NO_FATAL_FAILURE(StartCore(64 << 10));  // a client 64 KiB behind leaves its scan
  const auto [a, b] = TwoInOneSlot(1);
  ASSERT_NE(a, 0u);
  const Slot slot = meta_->Get(a)->slot;
  std::vector<uint64_t> acked_a;
  const std::string big(16 << 10, 'a');
  for (uint64_t seq = 1; seq <= 64; ++seq) {  // 1 MiB in all, many times the read's queue
    auto ids = Append({AppendItem{slot, a, big, EntryStamp{0, 1, seq}}});
    ASSERT_TRUE(ids.ok()) << ids.status();
    acked_a.push_back((*ids)[0]);
  }
  auto b_ids = Append({AppendItem{slot, b, "b", EntryStamp{0, 2, 1}}});
  ASSERT_TRUE(b_ids.ok()) << b_ids.status();

  // A follow read of `a` whose client stalls at its first batch.
  auto stalled = std::make_shared<RecordingSink>();
  stalled->Stall(true);
  ReadParams params;
  params.namespace_id = a;
  params.follow = true;
  params.deadline = Clock::now() + seconds(8);
  ASSERT_TRUE(reader_->Start(params, stalled).ok());
  // On any failure below, end the stalled stream as gRPC would, so the reader can shut down.
  struct CancelAtExit {
    RecordingSink* sink;
    ~CancelAtExit() { sink->Cancel(); }
  } cancel_at_exit{stalled.get()};
  ASSERT_TRUE(stalled->WaitStalled(seconds(10)));

  // Reads of `b` arriving now share the slot's scan; each completes as if alone.
  for (int i = 0; i < 3; ++i) {
    const auto started = Clock::now();
    auto entries = StartRead(b)->Wait(seconds(10));
    ASSERT_TRUE(entries.ok()) << "read " << i << " of b: " << entries.status();
    ASSERT_EQ(entries->size(), 1u);
    EXPECT_EQ((*entries)[0].entry_id(), (*b_ids)[0]);
    std::cerr << "RESULT stalled: read " << i << " of b took "
              << std::chrono::duration_cast<milliseconds>(Clock::now() - started).count()
              << " ms\n";
  }
  EXPECT_GE(metrics().read_scan_detaches.load(), 1u);

  // Once its client pulls again, the stalled read gets every entry once, in order, and (as a
  // following read) ends at its deadline.
  stalled->Stall(false);
  stalled->WaitForEntries(acked_a.size(), seconds(15));
  EXPECT_EQ(stalled->ids(), acked_a);
  const std::optional<absl::Status> ended = stalled->WaitFinished(seconds(15));
  ASSERT_TRUE(ended.has_value()) << "the follow read did not end by its deadline";
  EXPECT_TRUE(absl::IsDeadlineExceeded(*ended)) << *ended;
}

// A follower deep in its backlog stops delivering entries below a truncation within a second of
// the truncation, and goes on with the entries above it.
TEST_F(Core, ASlowFollowerStopsDeliveringWhatWasTruncated) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  const std::string data(2 << 10, 'f');
  std::vector<uint64_t> acked;
  for (uint64_t seq = 1; seq <= 1000; seq += 100) {
    std::vector<AppendItem> items;
    for (uint64_t i = 0; i < 100; ++i) {
      items.push_back(AppendItem{state->slot, 1, data, EntryStamp{0, 1, seq + i}});
    }
    auto ids = Append(std::move(items));
    ASSERT_TRUE(ids.ok()) << ids.status();
    acked.insert(acked.end(), ids->begin(), ids->end());
  }
  // 4 KiB batches of 2 entries, 20 ms each: the whole backlog would take 10 s.
  auto follower = std::make_shared<RecordingSink>(milliseconds(20));
  ReadParams params;
  params.namespace_id = 1;
  params.follow = true;
  params.deadline = Clock::now() + seconds(6);
  ASSERT_TRUE(reader_->Start(params, follower).ok());
  follower->WaitForEntries(10, seconds(5));
  const uint64_t cut = acked[800];
  ASSERT_TRUE(meta_->Truncate(1, static_cast<int64_t>(cut), Deadline()).ok());
  const auto truncated_at = Clock::now();
  EXPECT_TRUE(absl::IsDeadlineExceeded(follower->Wait(seconds(20)).status()));

  const std::vector<v1::Entry> entries = follower->entries();
  const std::vector<Clock::time_point> arrived = follower->arrived();
  int below_cut_late = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].entry_id() < cut && arrived[i] > truncated_at + seconds(1)) ++below_cut_late;
  }
  EXPECT_EQ(below_cut_late, 0);
  ASSERT_FALSE(entries.empty());
  EXPECT_EQ(entries.back().entry_id(), acked.back()) << "the follower did not reach the end";
  std::cerr << "RESULT truncation: " << entries.size() << " entries delivered, " << below_cut_late
            << " below the cut more than 1 s after it\n";
}

// A read whose client never pulls again ends by its deadline (gRPC cancels its stream), and
// the reads of its slot are never held up meanwhile.
TEST_F(Core, AReadThatNeverPullsAgainEndsWhenItsStreamIsCancelled) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  const std::string big(16 << 10, 'x');
  for (uint64_t seq = 1; seq <= 64; ++seq) {
    ASSERT_TRUE(Append({AppendItem{state->slot, 1, big, EntryStamp{0, 1, seq}}}).ok());
  }
  auto stalled = std::make_shared<RecordingSink>();
  stalled->Stall(true);
  ReadParams params;
  params.namespace_id = 1;
  params.deadline = Clock::now() + seconds(3);
  ASSERT_TRUE(reader_->Start(params, stalled).ok());
  ASSERT_TRUE(stalled->WaitStalled(seconds(10)));
  std::this_thread::sleep_until(params.deadline);
  stalled->Cancel();  // what gRPC does to a stream at its deadline
  const std::optional<absl::Status> ended = stalled->WaitFinished(seconds(10));
  ASSERT_TRUE(ended.has_value()) << "the stalled read did not end";
  EXPECT_FALSE(ended->ok());
}

// The first chunk of a split entry whose other chunks never come (its writer failed), then more
// than twice max_entry_bytes of complete entries of another writer: a read holds no more than
// that behind it. It ends with UNAVAILABLE naming the entry to read again from, having
// delivered everything before it, and lost nothing.
TEST_F(Core, AReadHoldsBackABoundedAmountBehindAnIncompleteEntry) {
  ASSERT_NO_FATAL_FAILURE(StartCore(ReaderOptions().read_queue_bytes, /*max_entry_bytes=*/8192));
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(Append({AppendItem{state->slot, 1, "before", EntryStamp{0, 1, 1}}}).ok());
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  // Another session and origin, encoded now: nothing shows yet that it cannot complete.
  const auto torn =
      EncodeEntry(std::string(3000, 't'), 12345, kMaxRecordBytes, {}, {777, 888, now_ms});
  ASSERT_GT(torn.size(), 1u);
  const absl::StatusOr<int64_t> torn_at =
      ProduceRaw(bootstrap(), state->slot.topic, state->slot.partition, EncodeKey(1), torn[0]);
  ASSERT_TRUE(torn_at.ok()) << torn_at.status();
  for (uint64_t seq = 2; seq <= 30; ++seq) {  // 29 x 900 bytes > 2 x 8192
    ASSERT_TRUE(
        Append({AppendItem{state->slot, 1, std::string(900, 'a'), EntryStamp{0, 1, seq}}}).ok());
  }
  auto sink = StartRead(1);
  auto entries = sink->Wait(seconds(30));
  ASSERT_FALSE(entries.ok());
  EXPECT_TRUE(absl::IsUnavailable(entries.status())) << entries.status();
  EXPECT_NE(entries.status().message().find(absl::StrCat("read again from entry ", *torn_at)),
            absl::string_view::npos)
      << entries.status();
  std::vector<v1::Entry> got = sink->entries();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data(), "before");
}

// What the pruner reads of a slot (EntryReader::FirstEntriesOf): each namespace's first entry
// past what it truncated; for one whose next entry is still incomplete (its last records may be
// on their way), that entry's first offset, never what completes after it; none for one with
// nothing past its truncation point.
TEST_F(Core, FirstEntriesCountAnEntryStillIncompleteAtTheReadsEnd) {
  auto busy = Create(1);
  ASSERT_TRUE(busy.ok()) << busy.status();
  ASSERT_TRUE(Create(2).ok());  // in the other slot: the allocator's next round is 1's slot
  auto idle = Create(3);
  ASSERT_TRUE(idle.ok()) << idle.status();
  ASSERT_EQ(idle->slot, busy->slot);
  const Slot slot = busy->slot;
  auto old = Append({AppendItem{slot, 1, "old", EntryStamp{0, 1, 1}},
                     AppendItem{slot, 3, "gone", EntryStamp{0, 1, 1}}});
  ASSERT_TRUE(old.ok()) << old.status();
  for (uint64_t ns : {1, 3}) {
    ASSERT_TRUE(meta_->Truncate(ns, static_cast<int64_t>((*old)[0]) + 1, Deadline()).ok());
  }
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  // The first record of a split entry of namespace 1, its others not (yet) written.
  const auto split =
      EncodeEntry(std::string(3000, 's'), 4242, kMaxRecordBytes, {}, {777, 888, now_ms});
  ASSERT_GT(split.size(), 1u);
  const absl::StatusOr<int64_t> split_at =
      ProduceRaw(bootstrap(), slot.topic, slot.partition, EncodeKey(1), split[0]);
  ASSERT_TRUE(split_at.ok()) << split_at.status();
  ASSERT_TRUE(Append({AppendItem{slot, 1, "after", EntryStamp{0, 1, 2}}}).ok());

  auto firsts = reader_->FirstEntriesOf(slot, 0, Deadline());
  ASSERT_TRUE(firsts.ok()) << firsts.status();
  EXPECT_EQ(*firsts, (EntryReader::FirstEntries{{1, *split_at}, {3, std::nullopt}}));
  // A read that finds the slot's end below one queried before fails, rather than vouch for
  // what it did not read.
  auto marks = QueryWatermarks(core_->admin(), slot, Deadline());
  ASSERT_TRUE(marks.ok()) << marks.status();
  auto short_end = reader_->FirstEntriesOf(slot, marks->high + 10, Deadline());
  EXPECT_TRUE(absl::IsUnavailable(short_end.status())) << short_end.status();
}

// gRPC's threads start the reads, and learn of the reader through gRPC's own synchronisation,
// which ThreadSanitizer cannot see (tests/tsan.supp): the reader publishes what its constructor
// set through its own lock, taken before a read starts. Here the reader's address reaches the
// starting thread through a relaxed atomic, which orders nothing; under TSan a reader that did
// not publish itself is reported as a race between its constructor and the starting thread
// (its shutdown check) or the read's thread (its metrics).
TEST_F(Core, AReadStartedByAThreadThatWasOnlyHandedTheReadersAddressSeesTheWholeReader) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(Append({AppendItem{state->slot, 1, "handed", EntryStamp{0, 1, 1}}}).ok());
  ReaderOptions options;
  options.offsets_for_times = core_->mock_cluster() == nullptr;
  options.topic_ids = core_->mock_cluster() == nullptr;
  std::unique_ptr<EntryReader> reader;
  std::atomic<EntryReader*> handed{nullptr};
  auto sink = std::make_shared<RecordingSink>();
  std::thread maker([&] {
    reader =
        std::make_unique<EntryReader>(core_->reader_kafka(), options, meta_, &metrics(), "handed");
    handed.store(reader.get(), std::memory_order_relaxed);
  });
  std::thread starter([&] {
    EntryReader* r = nullptr;
    while ((r = handed.load(std::memory_order_relaxed)) == nullptr) std::this_thread::yield();
    ReadParams params;
    params.namespace_id = 1;
    params.deadline = Deadline();
    const absl::Status started = r->Start(params, sink);
    if (!started.ok()) sink->Finish(started);
  });
  maker.join();
  starter.join();
  auto entries = sink->Wait(seconds(30));
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].data(), "handed");
  reader.reset();  // waits for the read's thread
}

// A leader cut off from the other brokers answers with the end it had at the cut, below what the
// writer already had acknowledged by the new leader (stood in for here: the writer "acknowledged"
// far past the slot's end). Reads ask again, for 5 s counted from the first short answer of the
// slot, then take the end they get.
class StaleEndTest : public Core {
 protected:
  std::atomic<int64_t> acknowledged_{int64_t{1} << 40};

  void SetUp() override {
    acknowledged_end_ = [this](const Slot&) { return acknowledged_.load(); };
    ASSERT_NO_FATAL_FAILURE(StartCore(ReaderOptions().read_queue_bytes));
  }

  // Creates `ns` with `count` entries; returns its slot.
  Slot Fill(uint64_t ns, int count) {
    auto state = Create(ns);
    EXPECT_TRUE(state.ok()) << state.status();
    if (!state.ok()) return Slot{};
    for (int seq = 1; seq <= count; ++seq) {
      const std::string payload = Payload(ns, seq);
      EXPECT_TRUE(
          Append({AppendItem{state->slot, ns, payload, EntryStamp{0, 1, uint64_t(seq)}}}).ok());
    }
    return state->slot;
  }

  // Reads `ns` to its end with `timeout`; returns the entries and how long it took.
  std::pair<size_t, Clock::duration> ReadAll(uint64_t ns, Clock::duration timeout) {
    const Clock::time_point began = Clock::now();
    auto sink = std::make_shared<RecordingSink>();
    ReadParams params;
    params.namespace_id = ns;
    params.deadline = began + timeout;
    const absl::Status started = reader_->Start(params, sink);
    EXPECT_TRUE(started.ok()) << started;
    const std::optional<absl::Status> ended = sink->WaitFinished(seconds(40));
    EXPECT_TRUE(ended.has_value() && ended->ok()) << (ended ? ended->ToString() : "not ended");
    return {sink->entries().size(), Clock::now() - began};
  }
};

TEST_F(StaleEndTest, AShortEndIsAskedAgainForFiveSecondsThenTakenByEveryRead) {
  Fill(1, 3);
  const auto [first, first_took] = ReadAll(1, seconds(30));
  EXPECT_EQ(first, 3u);
  EXPECT_GE(first_took, std::chrono::milliseconds(4500)) << "the short end was taken at once";
  // The slot was waited for long enough: the next read takes the end it gets.
  const auto [second, second_took] = ReadAll(1, seconds(30));
  EXPECT_EQ(second, 3u);
  EXPECT_LT(second_took, seconds(4)) << "every read waits for the same short end";
}

TEST_F(StaleEndTest, ReadsShortOfTimeWaitHalfOfItAndTogetherEndTheWait) {
  Fill(1, 3);
  // Each read waits at most half its 2 s; their waits add up, so after 5 s a read no longer
  // waits at all (a read short of time alone never ended the wait for the others before).
  const auto [count, first_took] = ReadAll(1, seconds(2));
  EXPECT_EQ(count, 3u);
  EXPECT_GE(first_took, std::chrono::milliseconds(700)) << "the short end was taken at once";
  std::vector<double> took;
  bool one_did_not_wait = false;
  for (int i = 0; i < 10 && !one_did_not_wait; ++i) {
    const auto [count, elapsed] = ReadAll(1, seconds(2));
    EXPECT_EQ(count, 3u);
    took.push_back(std::chrono::duration<double>(elapsed).count());
    EXPECT_LT(elapsed, std::chrono::milliseconds(1900)) << "a read waited past half its time";
    one_did_not_wait = elapsed < std::chrono::milliseconds(500);
  }
  EXPECT_TRUE(one_did_not_wait) << "reads of 2 s kept waiting; took "
                                << ::testing::PrintToString(took);
}

TEST_F(StaleEndTest, AReadManyWaitsOnceForAllItsShortSlots) {
  // Namespaces on both partitions of the topic.
  std::map<int32_t, uint64_t> by_partition;
  for (uint64_t ns = 1; ns <= 8 && by_partition.size() < 2; ++ns) {
    by_partition.emplace(Fill(ns, 2).partition, ns);
  }
  ASSERT_EQ(by_partition.size(), 2u);
  std::vector<ReadParams> reads;
  for (const auto& [partition, ns] : by_partition) {
    ReadParams& params = reads.emplace_back();
    params.namespace_id = ns;
  }
  const Clock::time_point began = Clock::now();
  for (ReadParams& params : reads) params.deadline = began + seconds(30);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(reader_->StartMany(reads, sink).ok());
  const std::optional<absl::Status> ended = sink->WaitFinished(seconds(40));
  ASSERT_TRUE(ended.has_value() && ended->ok()) << (ended ? ended->ToString() : "not ended");
  EXPECT_EQ(sink->entries().size(), 4u);
  // One wait of 5 s for the call, not one per slot.
  EXPECT_GE(Clock::now() - began, std::chrono::milliseconds(4500)) << "no wait at all";
  EXPECT_LT(Clock::now() - began, seconds(8));
}

TEST_F(StaleEndTest, MoreAcknowledgedInTheSlotStartsTheWaitAgain) {
  // The wait ended for an earlier short end; a later one, with entries acknowledged since, is
  // waited for again: a partition hours later is not given up for in advance.
  Fill(1, 3);
  EXPECT_GE(ReadAll(1, seconds(30)).second, std::chrono::milliseconds(4500));
  EXPECT_LT(ReadAll(1, seconds(30)).second, seconds(4)) << "the wait did not end";
  acknowledged_ += 10;
  const auto [count, took] = ReadAll(1, seconds(30));
  EXPECT_EQ(count, 3u);
  EXPECT_GE(took, std::chrono::milliseconds(4500)) << "the new short end was taken at once";
}

}  // namespace
}  // namespace wal::testing
