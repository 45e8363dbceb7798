// The slot scan driven without Kafka: a fake consumer hands out the records of one slot from
// memory, a fake host stands in for the EntryReader. What a shared scan promises: every read gets
// its own namespace's entries once and in order, a late read makes the scan go back, a stalled
// read is taken off and carries on alone, and records lost from Kafka end only the reads that
// needed them.
#include "server/log/slot_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "server/common/namespace_key.h"
#include "server/log/record_format.h"
#include "tests/support/recording_sink.h"

namespace wal {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::RecordingSink;

struct FakeRecord {
  std::string key;
  std::string value;
};

// One slot's records in memory, from offset 0; offsets below `low` are gone.
class FakeSlotConsumer : public Consumer {
 public:
  FakeSlotConsumer(const std::vector<FakeRecord>* records, int64_t low, bool seeks_fail,
                   std::function<void()> on_assign)
      : records_(records), low_(low), seeks_fail_(seeks_fail), on_assign_(std::move(on_assign)) {}

  absl::Status Assign(const std::string&, int32_t, int64_t offset) override {
    position_ = offset;
    polled_since_assign_ = false;
    if (on_assign_) on_assign_();
    return absl::OkStatus();
  }
  absl::Status Seek(const std::string&, int32_t, int64_t offset) override {
    // As librdkafka answers while the partition's fetcher is not running (also before it
    // started after an assign).
    if (seeks_fail_ || !polled_since_assign_) return absl::FailedPreconditionError("_STATE");
    position_ = offset;
    return absl::OkStatus();
  }
  absl::Status Unassign() override { return absl::OkStatus(); }

  Message Poll(int timeout_ms) override {
    polled_since_assign_ = true;
    auto* m = new rd_kafka_message_t();
    std::memset(m, 0, sizeof(*m));
    m->offset = position_;
    if (position_ < low_) {
      m->err = RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE;
    } else if (position_ >= static_cast<int64_t>(records_->size())) {
      // At the end: what librdkafka reports, after waiting a little as a real poll would.
      std::this_thread::sleep_for(milliseconds(std::min(timeout_ms, 2)));
      m->err = RD_KAFKA_RESP_ERR__PARTITION_EOF;
    } else {
      const FakeRecord& r = (*records_)[position_++];
      m->key = const_cast<char*>(r.key.data());
      m->key_len = r.key.size();
      m->payload = const_cast<char*>(r.value.data());
      m->len = r.value.size();
    }
    return Message(m, MessageDeleter{[](rd_kafka_message_t* msg) { delete msg; }});
  }

 private:
  const std::vector<FakeRecord>* records_;
  const int64_t low_;
  const bool seeks_fail_;
  const std::function<void()> on_assign_;
  int64_t position_ = 0;
  bool polled_since_assign_ = false;
};

class FakeHost : public ScanHost {
 public:
  std::vector<FakeRecord> records;
  int64_t low = 0;
  bool records_below_low_were_pruned = false;
  bool seeks_fail = false;
  bool narrow_consumers_fail = false;
  // Called when a narrow consumer is assigned, on the scan's thread.
  std::function<void()> on_narrow_assign;
  std::atomic<int> consumers_acquired{0};
  std::atomic<int> consumers_released{0};
  std::atomic<int> scans_ended{0};
  // The fetch sizes of the consumers acquired, in order.
  std::mutex sizes_mu;
  std::vector<FetchSize> sizes_acquired;

  absl::StatusOr<std::unique_ptr<Consumer>> AcquireConsumer(FetchSize size) override {
    if (size == FetchSize::kNarrow && narrow_consumers_fail) {
      return absl::UnavailableError("no narrow consumer");
    }
    ++consumers_acquired;
    {
      std::lock_guard<std::mutex> lock(sizes_mu);
      sizes_acquired.push_back(size);
    }
    return std::unique_ptr<Consumer>(new FakeSlotConsumer(
        &records, low, seeks_fail, size == FetchSize::kNarrow ? on_narrow_assign : nullptr));
  }
  void ReleaseConsumer(std::unique_ptr<Consumer>, FetchSize, bool) override {
    ++consumers_released;
  }
  absl::StatusOr<int64_t> LowWatermark(const Slot&, Clock::time_point) override { return low; }
  absl::Status PrunedOrLost(const Slot&, int64_t from, int64_t to, Clock::time_point) override {
    if (records_below_low_were_pruned) return absl::OkStatus();
    return absl::DataLossError("records " + std::to_string(from) + ".." + std::to_string(to) +
                               " lost");
  }
  void ScanEnded(SlotScan*) override { ++scans_ended; }
};

class SlotScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    context_.truncated_before = [](uint64_t, int64_t) { return std::optional<int64_t>(0); };
    context_.metrics = &metrics_;
  }
  void TearDown() override { JoinThreads(); }

  void JoinThreads() {
    // Read threads may still start scans (rejoining) while earlier threads are joined.
    while (true) {
      std::vector<std::thread> batch;
      {
        std::lock_guard<std::mutex> lock(threads_mu_);
        batch.swap(threads_);
      }
      if (batch.empty()) break;
      for (std::thread& t : batch) t.join();
    }
  }

  // Appends one entry of `ns`; returns its id (the offset of its record).
  uint64_t Append(uint64_t ns, const std::string& data) {
    host_.records.push_back({EncodeKey(ns), EncodeEntry(data, ++nonce_, 1 << 20)[0]});
    return host_.records.size() - 1;
  }
  void AppendForeign() { host_.records.push_back({"abc", "not a walserver record"}); }
  // Appends one packed record of an entry of each of `entries` (namespace, data); returns its id.
  uint64_t AppendPacked(const std::vector<std::pair<uint64_t, std::string>>& entries) {
    std::vector<std::string> records;
    records.reserve(entries.size());
    std::vector<PackedPart> parts;
    for (const auto& [ns, data] : entries) {
      records.push_back(EncodeEntry(data, ++nonce_, 1 << 20)[0]);
      parts.push_back({ns, records.back()});
    }
    std::string value(PackedRecordBytes(parts), '\0');
    EncodePackedTo(parts, value.data());
    host_.records.push_back({"", std::move(value)});
    return host_.records.size() - 1;
  }

  // A read of `ns` from `start` to the slot's end as it is now (or following), delivering to
  // `sink` on a thread of its own. A read taken off its scan rejoins a scan of its own, as
  // EntryReader does.
  std::shared_ptr<ReadMember> Read(uint64_t ns, int64_t start, std::shared_ptr<RecordingSink> sink,
                                   bool follow = false,
                                   std::shared_ptr<QueueBudget> call_budget = nullptr,
                                   size_t batch_bytes = 0) {
    ReadParams params;
    params.namespace_id = ns;
    params.follow = follow;
    params.call_budget = std::move(call_budget);
    params.batch_bytes = batch_bytes;
    NamespaceState state;
    state.namespace_id = ns;
    state.slot = slot_;
    auto member = std::make_shared<ReadMember>(&context_, params, sink, state, start,
                                               static_cast<int64_t>(host_.records.size()),
                                               Clock::now() + seconds(20));
    std::lock_guard<std::mutex> lock(threads_mu_);
    threads_.emplace_back([this, member, sink] {
      sink->Finish(member->Deliver([this, member] { RunScan({member}, /*shared=*/false); }));
    });
    return member;
  }

  // Namespace 1 has entries at offsets 0 and 1002, namespace 3 one at 501, namespace 2 the
  // records around them (indexed by a read of it first). A scan of namespace 1 from 0 skips from
  // 1 to 1002; `set_hook` installs, on the scan's path, the call that makes a read of namespace
  // 3 from offset 1 join. Both reads must get exactly their entries.
  void ExpectAReadJoiningAtASkipGetsItsEntry(
      const std::function<void(std::function<void()>)>& set_hook) {
    context_.options.index_min_skip_bytes = 0;
    Append(1, "first");
    for (int i = 0; i < 500; ++i) Append(2, std::string(100, 'b'));
    const uint64_t joiners_id = Append(3, "joiner's");
    for (int i = 0; i < 500; ++i) Append(2, std::string(100, 'b'));
    Append(1, "last");
    auto big = std::make_shared<RecordingSink>();
    RunScan({Read(2, 0, big)});
    ASSERT_EQ(big->WaitFinished(seconds(10)), absl::OkStatus());
    JoinThreads();

    auto sink = std::make_shared<RecordingSink>();
    auto joiner_sink = std::make_shared<RecordingSink>();
    auto scan = std::make_shared<SlotScan>(&host_, &context_, slot_, /*shared=*/true);
    ASSERT_TRUE(scan->TryJoin(Read(1, 0, sink)));
    std::shared_ptr<ReadMember> joiner = Read(3, 1, joiner_sink);
    // The hook holds what it uses (it may run until the scan ends); `joined` tells who came first.
    auto joined = std::make_shared<std::atomic<bool>>(false);
    set_hook([scan, joiner, joined] {
      if (joined->exchange(true)) return;
      EXPECT_TRUE(scan->TryJoin(joiner));
    });
    {
      std::lock_guard<std::mutex> lock(threads_mu_);
      threads_.emplace_back([scan] { scan->Run(); });
    }
    EXPECT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
    // The skip is chosen at offset 1, long before the first read can finish.
    if (!joined->exchange(true)) {
      joiner->Finish(absl::CancelledError("never joined"));  // so that its thread ends
      ADD_FAILURE() << "the hook never ran: the test proves nothing";
    }
    EXPECT_EQ(joiner_sink->WaitFinished(seconds(10)), absl::OkStatus());
    JoinThreads();
    set_hook(nullptr);
    EXPECT_EQ(sink->data(), (std::vector<std::string>{"first", "last"}));
    EXPECT_EQ(joiner_sink->data(), std::vector<std::string>{"joiner's"});
    EXPECT_EQ(joiner_sink->ids(), std::vector<uint64_t>{joiners_id});
  }

  std::shared_ptr<SlotScan> RunScan(const std::vector<std::shared_ptr<ReadMember>>& members,
                                    bool shared = true) {
    auto scan = std::make_shared<SlotScan>(&host_, &context_, slot_, shared);
    for (const auto& m : members) EXPECT_TRUE(scan->TryJoin(m));
    std::lock_guard<std::mutex> lock(threads_mu_);
    threads_.emplace_back([scan] { scan->Run(); });
    return scan;
  }

  const Slot slot_{"wal_0", 0};
  FakeHost host_;
  Metrics metrics_;
  ReadContext context_;
  uint64_t nonce_ = 0;
  std::mutex threads_mu_;  // rejoins start scans from read threads
  std::vector<std::thread> threads_;
};

TEST_F(SlotScanTest, ReadsOfOneSlotShareOneScanAndGetOnlyTheirOwnEntries) {
  std::vector<std::string> one, two;
  for (int i = 0; i < 50; ++i) {
    Append(1, one.emplace_back("one " + std::to_string(i)));
    if (i % 10 == 0) AppendForeign();
    Append(2, two.emplace_back("two " + std::to_string(i)));
  }
  auto sink1 = std::make_shared<RecordingSink>(), sink2 = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, sink1), Read(2, 0, sink2)});
  ASSERT_EQ(sink1->WaitFinished(seconds(10)), absl::OkStatus());
  ASSERT_EQ(sink2->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(sink1->data(), one);
  EXPECT_EQ(sink2->data(), two);
  EXPECT_EQ(host_.consumers_acquired.load(), 1);
  EXPECT_EQ(context_.records_skipped.load(), 5u) << "the foreign records";
  // Every record of the slot was taken from Kafka once, for both reads.
  uint64_t slot_bytes = 0;
  for (const FakeRecord& r : host_.records) slot_bytes += r.value.size();
  EXPECT_EQ(metrics_.read_scanned_bytes.load(), slot_bytes);
}

TEST_F(SlotScanTest, AReadThatJoinsLateMakesTheScanGoBackForIt) {
  std::vector<std::string> one, two;
  for (int i = 0; i < 20; ++i) {
    Append(1, one.emplace_back("one " + std::to_string(i)));
    Append(2, two.emplace_back("two " + std::to_string(i)));
  }
  auto follower = std::make_shared<RecordingSink>();
  auto scan = RunScan({Read(1, 0, follower, /*follow=*/true)});
  ASSERT_TRUE(follower->WaitForEntries(one.size(), seconds(10)));
  // The scan is at the end of the slot; a read from the start joins it behind.
  auto late = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scan->TryJoin(Read(2, 0, late)));
  ASSERT_EQ(late->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(late->data(), two);
  EXPECT_EQ(metrics_.read_scan_rewinds.load(), 1u);
  EXPECT_EQ(host_.consumers_acquired.load(), 1);
  follower->Cancel();
  EXPECT_EQ(follower->WaitFinished(seconds(10))->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(follower->data(), one) << "nothing again after the scan went back";
}

TEST_F(SlotScanTest, AStalledReadIsTakenOffTheScanAndTheOthersGoOn) {
  context_.options.batch_bytes = 100;
  context_.options.read_queue_bytes = 1000;
  std::vector<std::string> one, two;
  for (int i = 0; i < 200; ++i) {
    Append(1, one.emplace_back(std::string(100, 'a') + std::to_string(i)));
    Append(2, two.emplace_back(std::string(100, 'b') + std::to_string(i)));
  }
  auto stalled = std::make_shared<RecordingSink>(), moving = std::make_shared<RecordingSink>();
  stalled->Stall(true);
  RunScan({Read(1, 0, stalled), Read(2, 0, moving)});
  ASSERT_EQ(moving->WaitFinished(seconds(10)), absl::OkStatus())
      << "the stalled read held the other up";
  EXPECT_EQ(moving->data(), two);
  EXPECT_GE(metrics_.read_scan_detaches.load(), 1u);
  // Once its client pulls again, the stalled read goes on with a scan of its own from where it
  // stood, and still gets every entry once, in order.
  stalled->Stall(false);
  ASSERT_EQ(stalled->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(stalled->data(), one);
  // A scan of its own waits up to a second for a client that keeps pulling rather than detach it
  // again (each detach costs a new scan): at most one detach per read (the other one's client
  // may fall behind too).
  EXPECT_LE(metrics_.read_scan_detaches.load(), 2u);
  EXPECT_LE(host_.consumers_acquired.load(), 3);
}

TEST_F(SlotScanTest, ABigReadOfAReadManyWhoseClientKeepsPullingStaysOnTheSharedScan) {
  // A datanode opening its regions with one ReadMany: one big region among many empty ones of
  // the slot, and a client slower than the scan. Detaching the big read each time the call's
  // queue filled cost a rewind or a new scan per queue-full (10x the time of the read alone).
  context_.options.batch_bytes = 200;
  // The client pulls every millisecond; a window far above that keeps a loaded machine's
  // scheduling from making it look stalled (with 100 ms it was taken off once beside the
  // sanitizer suites). A scan that took off full reads whatever their client does still fails.
  context_.options.pulling_window = seconds(5);
  std::vector<std::string> big;
  for (int i = 0; i < 300; ++i) {
    Append(1, big.emplace_back(std::string(100, 'a') + std::to_string(i)));
  }
  auto call = std::make_shared<QueueBudget>(1000);  // a few batches for the whole call
  std::vector<std::shared_ptr<RecordingSink>> empty_sinks;
  std::vector<std::shared_ptr<ReadMember>> members;
  for (uint64_t ns = 100; ns < 200; ++ns) {
    members.push_back(
        Read(ns, 0, empty_sinks.emplace_back(std::make_shared<RecordingSink>()), false, call));
  }
  // Last, so that its client's time to pull starts just before the scan does.
  auto sink = std::make_shared<RecordingSink>(milliseconds(1));
  members.push_back(Read(1, 0, sink, false, call));
  RunScan(members);
  ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(sink->data(), big);
  for (auto& empty : empty_sinks) {
    ASSERT_EQ(empty->WaitFinished(seconds(10)), absl::OkStatus());
    EXPECT_TRUE(empty->entries().empty());
  }
  EXPECT_EQ(metrics_.read_scan_detaches.load(), 0u);
  EXPECT_EQ(metrics_.read_scan_rewinds.load(), 0u);
  EXPECT_EQ(host_.consumers_acquired.load(), 1) << "one scan for the slot";
  EXPECT_EQ(call->queued.load(), 0u) << "every queued byte was given back";
}

TEST_F(SlotScanTest, ASlowReadIsNotWaitedForWhenItWouldHoldUpAnotherCall) {
  // The same slow client on a plain Read, beside another caller's read of the slot: the scan
  // must not go at its pace, so it is taken off as before.
  context_.options.batch_bytes = 200;
  context_.options.read_queue_bytes = 1000;
  std::vector<std::string> big, other;
  for (int i = 0; i < 300; ++i) {
    Append(1, big.emplace_back(std::string(100, 'a') + std::to_string(i)));
    Append(2, other.emplace_back(std::string(100, 'b') + std::to_string(i)));
  }
  auto slow = std::make_shared<RecordingSink>(milliseconds(1));
  auto fast = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, slow), Read(2, 0, fast)});
  ASSERT_EQ(fast->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(fast->data(), other);
  ASSERT_EQ(slow->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(slow->data(), big);
  EXPECT_GE(metrics_.read_scan_detaches.load(), 1u);
}

TEST_F(SlotScanTest, AReadOfAReadManyThatFillsItsBatchesGrowsThemWhileItsCallHasRoom) {
  context_.options.batch_bytes = 1600;  // what a Read sends at once: 16 entries
  std::vector<std::string> big;
  for (int i = 0; i < 300; ++i) {
    Append(1, big.emplace_back(std::string(96, 'a') + absl::StrFormat("%04d", i)));
  }
  // Batches of 200 bytes (2 entries) to begin with, as a share of the call's budget.
  auto grows = std::make_shared<RecordingSink>(), capped = std::make_shared<RecordingSink>();
  auto roomy_call = std::make_shared<QueueBudget>(1 << 20);
  RunScan({Read(1, 0, grows, false, roomy_call, 200)});
  ASSERT_EQ(grows->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(grows->data(), big);
  // (A batch may also go out before it is full, every 100 ms; only full ones grow the next.)
  const std::vector<size_t> grown = grows->batch_sizes();
  ASSERT_FALSE(grown.empty());
  EXPECT_LE(grown.front(), 2u);
  EXPECT_EQ(*std::max_element(grown.begin(), grown.end()), 16u) << "up to a Read's batch";
  JoinThreads();
  EXPECT_EQ(roomy_call->batch_growth.load(), 0u) << "given back when the read ended";

  // A call with room for 300 bytes of growth (a quarter of its budget): from 2 entries to 4,
  // not to 8.
  auto tight_call = std::make_shared<QueueBudget>(1200);
  RunScan({Read(1, 0, capped, false, tight_call, 200)});
  ASSERT_EQ(capped->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(capped->data(), big);
  const std::vector<size_t> capped_sizes = capped->batch_sizes();
  EXPECT_EQ(*std::max_element(capped_sizes.begin(), capped_sizes.end()), 4u);
  JoinThreads();
  EXPECT_EQ(tight_call->batch_growth.load(), 0u);
}

TEST_F(SlotScanTest, TheReadsOfAReadManyShareTheirCallsRoomToGrowBatches) {
  context_.options.batch_bytes = 1600;
  std::vector<std::string> one, two;
  for (int i = 0; i < 300; ++i) {
    Append(1, one.emplace_back(std::string(96, 'a') + absl::StrFormat("%04d", i)));
    Append(2, two.emplace_back(std::string(96, 'b') + absl::StrFormat("%04d", i)));
  }
  // Room for 300 bytes of growth: the first read to fill a batch grows from 2 entries to 4;
  // the other's growth would not fit, and neither would the first's next.
  auto call = std::make_shared<QueueBudget>(1200);
  auto first = std::make_shared<RecordingSink>(), second = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, first, false, call, 200), Read(2, 0, second, false, call, 200)});
  ASSERT_EQ(first->WaitFinished(seconds(10)), absl::OkStatus());
  ASSERT_EQ(second->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(first->data(), one);
  EXPECT_EQ(second->data(), two);
  std::vector<size_t> largest;
  for (const auto& sink : {first, second}) {
    const std::vector<size_t> sizes = sink->batch_sizes();
    largest.push_back(*std::max_element(sizes.begin(), sizes.end()));
  }
  std::sort(largest.begin(), largest.end());
  EXPECT_EQ(largest, (std::vector<size_t>{2, 4}));
}

TEST_F(SlotScanTest, AReadOfAReadManyMayHoldAllOfItsCallsBudget) {
  context_.options.batch_bytes = 200;
  context_.options.read_queue_bytes = 1000;  // a read's own bound, which a budget replaces
  std::vector<std::string> big;
  for (int i = 0; i < 300; ++i) {
    Append(1, big.emplace_back(std::string(100, 'a') + std::to_string(i)));
  }
  // The client stalls: the call's budget (the read queues about 32 KB of its 100 KB) keeps the
  // read on the scan although it is far over a read's own bound.
  auto roomy = std::make_shared<RecordingSink>();
  roomy->Stall(true);
  auto call = std::make_shared<QueueBudget>(100000);
  RunScan(
      {Read(1, 0, roomy, false, call), Read(2, 0, std::make_shared<RecordingSink>(), false, call)});
  const auto give_up = Clock::now() + seconds(10);
  while (host_.scans_ended.load() == 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(host_.scans_ended.load(), 1) << "the scan read the whole slot without waiting";
  EXPECT_EQ(metrics_.read_scan_detaches.load(), 0u);
  roomy->Stall(false);
  ASSERT_EQ(roomy->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(roomy->data(), big);
  EXPECT_EQ(call->queued.load(), 0u) << "every queued byte was given back";

  // A budget spent: the stalled read is taken off the scan as before.
  auto spent = std::make_shared<RecordingSink>();
  spent->Stall(true);
  RunScan({Read(1, 0, spent, false, std::make_shared<QueueBudget>(2000))});
  const auto give_up_again = Clock::now() + seconds(10);
  while (metrics_.read_scan_detaches.load() == 0 && Clock::now() < give_up_again) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(metrics_.read_scan_detaches.load(), 1u);
  spent->Stall(false);
  ASSERT_EQ(spent->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(spent->data(), big);
}

TEST_F(SlotScanTest, AScanOfItsOwnWaitsForASlowClientButReleasesAStalledOne) {
  context_.options.batch_bytes = 100;
  context_.options.read_queue_bytes = 1000;
  std::vector<std::string> one;
  for (int i = 0; i < 100; ++i)
    Append(1, one.emplace_back(std::string(100, 'a') + std::to_string(i)));
  auto sink = std::make_shared<RecordingSink>();
  sink->Stall(true);
  RunScan({Read(1, 0, sink)}, /*shared=*/false);
  // Stalled for good: after about a second the scan lets the read go and ends, so a stalled
  // client holds no consumer (and the scan read no further while it waited).
  const auto give_up = Clock::now() + seconds(10);
  while (host_.scans_ended.load() == 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(host_.scans_ended.load(), 1);
  EXPECT_EQ(host_.consumers_released.load(), 1);
  EXPECT_EQ(metrics_.read_scan_detaches.load(), 1u);
  sink->Stall(false);
  ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(sink->data(), one);
}

TEST_F(SlotScanTest, LostRecordsEndOnlyTheReadsThatNeededThem) {
  for (int i = 0; i < 10; ++i) Append(1, "one " + std::to_string(i));
  host_.low = 5;  // offsets 0..4 gone, and nobody pruned them
  auto needs_lost = std::make_shared<RecordingSink>(),
       after_loss = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, needs_lost), Read(1, 6, after_loss)});
  const std::optional<absl::Status> lost = needs_lost->WaitFinished(seconds(10));
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(lost->code(), absl::StatusCode::kDataLoss) << *lost;
  EXPECT_TRUE(needs_lost->entries().empty());
  ASSERT_EQ(after_loss->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(after_loss->data(), (std::vector<std::string>{"one 6", "one 7", "one 8", "one 9"}));
}

TEST_F(SlotScanTest, PrunedRecordsAreSkippedWithoutAnError) {
  for (int i = 0; i < 10; ++i) Append(1, "one " + std::to_string(i));
  host_.low = 5;
  host_.records_below_low_were_pruned = true;
  auto sink = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, sink)});
  ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(sink->data(), (std::vector<std::string>{"one 5", "one 6", "one 7", "one 8", "one 9"}));
}

// The pruner's read of a slot takes one entry of each namespace (EntryReader::FirstEntriesOf).
// A truncation between the scan and the delivery used to drop that entry at delivery: the
// namespace came out with none, pinned nothing, and its entries past the truncation point were
// pruned (seen in PruningTest.RandomOperations under AddressSanitizer). The entry found comes as
// found: the namespace counts from it, which is at or below what it still needs.
TEST_F(SlotScanTest, APrunersReadDeliversTheEntryItFoundEvenIfTruncatedBeforeDelivery) {
  const uint64_t found = Append(1, "found");
  Append(1, "still needed");
  ReadParams params;
  params.namespace_id = 1;
  params.limit = 1;
  params.slot_read = true;
  params.for_pruner = true;
  NamespaceState state;
  state.namespace_id = 1;
  state.slot = slot_;
  auto sink = std::make_shared<RecordingSink>();
  auto member = std::make_shared<ReadMember>(&context_, params, sink, state, 0,
                                             static_cast<int64_t>(host_.records.size()),
                                             Clock::now() + seconds(20));
  RunScan({member});
  const auto give_up = Clock::now() + seconds(10);
  while (host_.scans_ended.load() == 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(host_.scans_ended.load(), 1) << "the scan never ended";
  // Truncated past the entry found, after the scan queued it and before it is delivered.
  context_.truncated_before = [found](uint64_t, int64_t) {
    return std::optional<int64_t>(static_cast<int64_t>(found) + 1);
  };
  EXPECT_EQ(member->Deliver([] {}), absl::OkStatus());
  EXPECT_EQ(sink->ids(), std::vector<uint64_t>{found});
}

// A retried entry landed twice (its first copy was still on its way through another walserver
// when the retry looked, log/retried_entries.h), and its namespace was truncated between the
// copies, to the id the retry answered. The read delivers the copy past the cut, as a read from
// the cut would. The cut used to apply after the copies were matched: the first copy, below it,
// hid the second as its duplicate and was then dropped itself, and the pruner's read of the slot
// reported the namespace without the entry.
TEST_F(SlotScanTest, ATruncationBetweenTwoCopiesOfARetriedEntryKeepsTheCopyPastIt) {
  const EntryStamp stamp{1, 7, 1};
  const auto copy = [&] {
    host_.records.push_back({EncodeKey(1), EncodeEntry("retried", ++nonce_, 1 << 20, stamp)[0]});
    return host_.records.size() - 1;
  };
  copy();
  Append(2, "another namespace's");
  const uint64_t second = copy();
  const uint64_t after = Append(1, "after");
  ReadParams params;
  params.namespace_id = 1;
  // Read from the start with the cut at the second copy: what a truncation found mid-read leaves.
  NamespaceState state;
  state.namespace_id = 1;
  state.slot = slot_;
  state.truncated_before = static_cast<int64_t>(second);
  auto sink = std::make_shared<RecordingSink>();
  auto member = std::make_shared<ReadMember>(&context_, params, sink, state, 0,
                                             static_cast<int64_t>(host_.records.size()),
                                             Clock::now() + seconds(20));
  RunScan({member});
  EXPECT_EQ(member->Deliver([] {}), absl::OkStatus());
  EXPECT_EQ(sink->ids(), (std::vector<uint64_t>{second, after}));
}

// A slot as writers leave it: namespaces in bursts and trickles, entries split into records
// that interleave with other namespaces' records, retried copies, fences of a new epoch, and
// records walserver did not write. With `packed`, runs of whole entries and fences of different
// namespaces are packed into shared records, as group commit leaves them.
void FillSlotAtRandom(std::mt19937* random, std::vector<FakeRecord>* records, bool packed) {
  constexpr uint64_t kNamespaces = 12;
  std::vector<std::vector<std::string>> unsent_chunks(kNamespaces + 1);
  std::vector<uint64_t> epoch(kNamespaces + 1, 1), sequence(kNamespaces + 1, 0);
  std::vector<std::pair<std::string, EntryStamp>> last_entry(kNamespaces + 1);
  // What the writers produced, in order: the namespace (0: not walserver's), the format-1
  // record, and whether it is a whole entry or a fence (which group commit may pack).
  struct Written {
    uint64_t ns;
    std::string record;
    bool packable;
  };
  std::vector<Written> written;
  std::vector<bool> split(kNamespaces + 1, false);
  uint64_t nonce = 0;
  uint64_t burst_of = 1;
  int burst_left = 0;
  auto pick = [&](uint64_t n) {
    return std::uniform_int_distribution<uint64_t>(0, n - 1)(*random);
  };
  while (written.size() < 6000) {
    if (burst_left == 0) {  // a namespace writes alone for a while, or all trickle together
      burst_of = pick(kNamespaces) + 1;
      burst_left = static_cast<int>(pick(3) == 0 ? pick(1500) : pick(20));
    }
    --burst_left;
    const uint64_t ns = pick(20) == 0 ? pick(kNamespaces) + 1 : burst_of;
    if (pick(200) == 0) {
      written.push_back({0, "not a walserver record", false});
      continue;
    }
    std::vector<std::string>& chunks = unsent_chunks[ns];
    if (chunks.empty()) {
      const uint64_t what = pick(100);
      if (what == 0) {
        ++epoch[ns];
        written.push_back({ns, EncodeFence(epoch[ns]), true});
        continue;
      }
      if (what < 3 && !last_entry[ns].first.empty()) {  // a retried copy of the last entry
        const auto& [data, stamp] = last_entry[ns];
        chunks = EncodeEntry(data, ++nonce, 64, stamp);
      } else {
        const std::string data =
            "ns " + std::to_string(ns) + " entry " + std::string(pick(150), 'x');
        const EntryStamp stamp{epoch[ns], /*writer_id=*/7, ++sequence[ns]};
        last_entry[ns] = {data, stamp};
        chunks = EncodeEntry(data, ++nonce, 64, stamp);
      }
      split[ns] = chunks.size() > 1;
      std::reverse(chunks.begin(), chunks.end());  // taken from the back
    }
    written.push_back({ns, std::move(chunks.back()), !split[ns]});
    chunks.pop_back();
  }
  // A packed record takes the place of a run of packable records of different namespaces, so
  // every namespace's records keep their order.
  std::vector<PackedPart> run;
  auto flush = [&] {
    if (run.size() == 1)
      records->push_back({EncodeKey(run[0].namespace_id), std::string(run[0].record)});
    if (run.size() > 1) {
      std::string value(PackedRecordBytes(run), '\0');
      EncodePackedTo(run, value.data());
      records->push_back({"", std::move(value)});
    }
    run.clear();
  };
  size_t run_limit = 1;
  for (const Written& w : written) {
    const bool joins = packed && w.packable &&
                       std::none_of(run.begin(), run.end(),
                                    [&](const PackedPart& p) { return p.namespace_id == w.ns; });
    if (!joins || run.size() >= run_limit) {
      flush();
      run_limit = packed ? 1 + pick(8) : 1;
    }
    if (packed && w.packable) {
      run.push_back({w.ns, w.record});
    } else {
      records->push_back({w.ns == 0 ? "abc" : EncodeKey(w.ns), w.record});
    }
  }
  flush();
}

TEST_F(SlotScanTest, ReadsThroughTheIndexGetExactlyWhatFullScansGet) {
  // Reads of every namespace (and of some never written) from random starts, first each alone
  // with the index off, then in groups sharing scans with it on, as the index fills from their
  // own scans. Any difference is a record the index hid or a skip that lost one.
  for (const uint32_t seed : {1u, 2u, 3u, 4u, 5u, 6u}) {
    const bool packed = seed > 3;
    SCOPED_TRACE("seed " + std::to_string(seed) + (packed ? ", packed" : ""));
    std::mt19937 random(seed);
    host_.records.clear();
    // A new slot's records: what the index knew of the last one is gone, once no scan of the
    // last one is left to tell it more.
    JoinThreads();
    context_.slot_indexes.Of(slot_).LogWentBack();
    FillSlotAtRandom(&random, &host_.records, packed);
    const auto size = static_cast<int64_t>(host_.records.size());
    struct Case {
      uint64_t ns;
      int64_t start;
      std::vector<uint64_t> ids;
      std::vector<std::string> data;
    };
    std::vector<Case> cases;
    for (int i = 0; i < 48; ++i) {
      const uint64_t ns = std::uniform_int_distribution<uint64_t>(1, 14)(random);
      const int64_t start =
          i % 3 == 0 ? 0 : std::uniform_int_distribution<int64_t>(0, size - 1)(random);
      cases.push_back(Case{ns, start, {}, {}});
    }

    context_.options.slot_index = false;
    const uint64_t scanned_before = metrics_.read_scanned_bytes.load();
    for (Case& c : cases) {
      auto sink = std::make_shared<RecordingSink>();
      RunScan({Read(c.ns, c.start, sink)});
      ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
      c.ids = sink->ids();
      c.data = sink->data();
    }
    const uint64_t scanned_without = metrics_.read_scanned_bytes.load() - scanned_before;

    context_.options.slot_index = true;
    context_.options.index_min_skip_bytes = 0;  // skip as soon as kMinSkip records
    const uint64_t skips_before = metrics_.read_index_skips.load();
    for (size_t first = 0; first < cases.size(); first += 4) {
      std::vector<std::shared_ptr<RecordingSink>> sinks;
      std::vector<std::shared_ptr<ReadMember>> members;
      for (size_t i = first; i < first + 4; ++i) {
        sinks.push_back(std::make_shared<RecordingSink>());
        members.push_back(Read(cases[i].ns, cases[i].start, sinks.back()));
      }
      RunScan(members);
      for (size_t i = first; i < first + 4; ++i) {
        const Case& c = cases[i];
        SCOPED_TRACE("namespace " + std::to_string(c.ns) + " from " + std::to_string(c.start));
        ASSERT_EQ(sinks[i - first]->WaitFinished(seconds(10)), absl::OkStatus());
        EXPECT_EQ(sinks[i - first]->ids(), c.ids);
        EXPECT_EQ(sinks[i - first]->data(), c.data);
      }
    }
    const uint64_t scanned_with =
        metrics_.read_scanned_bytes.load() - scanned_before - scanned_without;
    // The index was used, and it saved reading: 12 groups of 4 against 48 full scans.
    EXPECT_GT(metrics_.read_index_skips.load(), skips_before);
    EXPECT_LT(scanned_with, scanned_without / 4);
  }
}

TEST_F(SlotScanTest, ASmallNamespaceBehindAnotherOnesRecordsCostsOnlyItsOwnOnceIndexed) {
  context_.options.index_min_skip_bytes = 0;  // the slot holds less than a MiB
  std::vector<std::string> small;
  Append(1, small.emplace_back("small 0"));
  for (int i = 0; i < 5000; ++i) Append(2, std::string(100, 'b'));
  Append(1, small.emplace_back("small 1"));
  for (int i = 0; i < 5000; ++i) Append(2, std::string(100, 'b'));
  Append(1, small.emplace_back("small 2"));
  // A first read (the other namespace's replay) indexes the slot.
  auto big = std::make_shared<RecordingSink>();
  RunScan({Read(2, 0, big)});
  ASSERT_EQ(big->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(big->entries().size(), 10000u);

  const uint64_t scanned_before = metrics_.read_scanned_bytes.load();
  auto sink = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, sink)});
  ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(sink->data(), small);
  // Three records of its own, and the ones within kJoinGap of them that a run may hold.
  EXPECT_LE(metrics_.read_scanned_bytes.load() - scanned_before, 3 * 200u);
  EXPECT_EQ(metrics_.read_index_skips.load(), 2u) << "past the other's two runs";
}

// A scan tells the index what it saw every 4096 namespace records; a packed record straddling
// that count must be told whole. Here the 4096th is the 38th of the 100 in packed record 41, and
// the sparse namespace's entry comes after it: told only in part, the index would let a read of
// the sparse namespace skip from 0 past it, to its next entry.
TEST_F(SlotScanTest, TheIndexLearnsEveryNamespaceOfAPackedRecordThatStraddlesAReport) {
  context_.options.index_min_skip_bytes = 0;
  constexpr uint64_t kSparse = 500;
  std::vector<std::pair<uint64_t, std::string>> dense;
  for (uint64_t ns = 1; ns <= 99; ++ns) dense.emplace_back(ns, "d");
  for (int i = 0; i <= 40; ++i) AppendPacked(dense);  // 41 x 99 = 4059 namespace records
  auto with_sparse = dense;
  with_sparse.emplace_back(kSparse, "sparse first");
  AppendPacked(with_sparse);
  for (int i = 0; i < 100; ++i) Append(2, "d");
  Append(kSparse, "sparse last");
  auto full = std::make_shared<RecordingSink>();
  RunScan({Read(2, 0, full)});  // indexes the slot
  ASSERT_EQ(full->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(full->entries().size(), 142u);

  auto sink = std::make_shared<RecordingSink>();
  RunScan({Read(kSparse, 0, sink)});
  ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(sink->data(), (std::vector<std::string>{"sparse first", "sparse last"}));
  EXPECT_EQ(metrics_.read_index_skips.load(), 1u) << "past namespace 2's run only";
}

TEST_F(SlotScanTest, AScanBegunBeforeTheTopicWasMadeAgainTellsTheIndexNothing) {
  context_.options.index_min_skip_bytes = 0;
  std::vector<std::string> small;
  Append(1, small.emplace_back("small 0"));
  for (int i = 0; i < 1000; ++i) Append(2, std::string(100, 'b'));
  Append(1, small.emplace_back("small 1"));
  for (int i = 0; i < 1000; ++i) Append(2, std::string(100, 'b'));
  SlotIndex& index = context_.slot_indexes.Of(slot_);
  index.OnLog(TopicId{7, 1});
  auto big = std::make_shared<RecordingSink>();
  RunScan({Read(2, 0, big)});
  ASSERT_EQ(big->WaitFinished(seconds(10)), absl::OkStatus());
  JoinThreads();
  ASSERT_FALSE(index.stretches().empty());

  // A read finds the topic's id changed while the next scan runs (at its first skip, once it
  // has read records before and will read more after).
  std::atomic<bool> changed{false};
  context_.before_skip_for_test = [&] {
    if (!changed.exchange(true)) index.OnLog(TopicId{7, 2});
  };
  auto sink = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, sink)});
  ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
  JoinThreads();
  context_.before_skip_for_test = nullptr;
  ASSERT_TRUE(changed.load()) << "the scan never skipped: the test proves nothing";
  EXPECT_EQ(sink->data(), small);
  EXPECT_TRUE(index.stretches().empty()) << "what the scan read may be of the old topic";

  // A scan begun on the new one tells the index again.
  auto again = std::make_shared<RecordingSink>();
  RunScan({Read(2, 0, again)});
  ASSERT_EQ(again->WaitFinished(seconds(10)), absl::OkStatus());
  JoinThreads();
  EXPECT_FALSE(index.stretches().empty());
}

TEST_F(SlotScanTest, AReadJoiningAsTheScanIsAboutToSkipGetsWhatTheSkipWouldPass) {
  // The joiner comes after the scan chose to skip and before it published that (ahead of the
  // scan, so not by a rewind): the skip must wait for it, not pass its record.
  ExpectAReadJoiningAtASkipGetsItsEntry(
      [this](std::function<void()> join) { context_.before_skip_for_test = std::move(join); });
  EXPECT_EQ(metrics_.read_scan_rewinds.load(), 0u) << "joined ahead, not by a rewind";
}

TEST_F(SlotScanTest, AReadJoiningBehindAScanThatJustChangedConsumersMakesItGoBack) {
  // The skip is an assign of a narrow consumer at its target; the joiner comes as that happens,
  // so behind the scan: the scan goes back for it before its new consumer fetched anything
  // (when librdkafka refuses a seek).
  ExpectAReadJoiningAtASkipGetsItsEntry(
      [this](std::function<void()> join) { host_.on_narrow_assign = std::move(join); });
  EXPECT_GE(metrics_.read_scan_rewinds.load(), 1u);
  // 1 to 1002, then after the rewind 2 to 501 and 502 to 1002: the new consumer is not sought
  // before it fetched (which would fail, and read through instead).
  EXPECT_EQ(metrics_.read_index_skips.load(), 3u);
}

TEST_F(SlotScanTest, AScanFetchesNarrowOnceItSkipsAndWideAgainWhereItWantsEveryRecord) {
  // Namespace 1: two entries with 2,000 records of namespace 2 after each, then 6,000 entries
  // (2.4 MB) of its own. Its read skips twice, then wants every record for more than
  // kWideAgainAfterBytes.
  context_.options.index_min_skip_bytes = 0;
  std::vector<std::string> one;
  for (int run = 0; run < 2; ++run) {
    Append(1, one.emplace_back("sparse " + std::to_string(run)));
    for (int i = 0; i < 2000; ++i) Append(2, std::string(100, 'b'));
  }
  for (int i = 0; i < 6000; ++i) Append(1, one.emplace_back(std::string(400, 'a')));
  auto big = std::make_shared<RecordingSink>();
  RunScan({Read(2, 0, big)});  // indexes the slot; nothing to skip, so wide throughout
  ASSERT_EQ(big->WaitFinished(seconds(10)), absl::OkStatus());
  JoinThreads();
  EXPECT_EQ(host_.sizes_acquired, std::vector<FetchSize>{FetchSize::kWide});

  host_.sizes_acquired.clear();
  auto sink = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, sink)});
  ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
  JoinThreads();
  EXPECT_EQ(sink->data(), one);
  EXPECT_EQ(metrics_.read_index_skips.load(), 2u);
  // Wide from the start, narrow at the first skip (the second seeks the narrow consumer), wide
  // again in the dense part.
  EXPECT_EQ(host_.sizes_acquired,
            (std::vector<FetchSize>{FetchSize::kWide, FetchSize::kNarrow, FetchSize::kWide}));
  EXPECT_EQ(metrics_.read_fetch_size_changes.load(), 2u);
  EXPECT_EQ(host_.consumers_released.load(), host_.consumers_acquired.load());
}

TEST_F(SlotScanTest, AScanThatCannotMoveItsFetchesReadsThroughWhatTheIndexWouldSkip) {
  context_.options.index_min_skip_bytes = 0;
  std::vector<std::string> small;
  for (int run = 0; run < 2; ++run) {
    Append(1, small.emplace_back("small " + std::to_string(run)));
    for (int i = 0; i < 1000; ++i) Append(2, std::string(100, 'b'));
  }
  Append(1, small.emplace_back("small 2"));
  auto big = std::make_shared<RecordingSink>();
  RunScan({Read(2, 0, big)});
  ASSERT_EQ(big->WaitFinished(seconds(10)), absl::OkStatus());
  host_.seeks_fail = true;

  // The first skip takes a narrow consumer (assigned, not sought); the second would seek it.
  uint64_t scanned_before = metrics_.read_scanned_bytes.load();
  auto sink = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, sink)});
  ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(sink->data(), small);
  EXPECT_EQ(metrics_.read_index_skips.load(), 1u);
  const uint64_t one_gap = metrics_.read_scanned_bytes.load() - scanned_before;
  EXPECT_GT(one_gap, 1000 * 100u) << "the second gap read through";

  // No narrow consumer to be had either: both gaps are read through.
  host_.narrow_consumers_fail = true;
  scanned_before = metrics_.read_scanned_bytes.load();
  sink = std::make_shared<RecordingSink>();
  RunScan({Read(1, 0, sink)});
  ASSERT_EQ(sink->WaitFinished(seconds(10)), absl::OkStatus());
  EXPECT_EQ(sink->data(), small);
  EXPECT_EQ(metrics_.read_index_skips.load(), 1u);
  EXPECT_GT(metrics_.read_scanned_bytes.load() - scanned_before, one_gap + 1000 * 100u);
}

}  // namespace
}  // namespace wal
