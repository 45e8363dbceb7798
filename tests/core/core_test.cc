// The concurrent core of walserver with no gRPC in between: the metadata store, the writer's
// producer pool, the reader's shared scans and (on real Kafka) the pruner, driven from many
// threads at once, with the results checked.
//
// Its other purpose is ThreadSanitizer (scripts/test.sh runs the *_core_test tests in a
// -DWAL_SANITIZE=thread build). Every hand-off in these tests goes through our own locks or
// librdkafka's (routed to pthreads, see server/kafka/tsan_c11_threads.cc), which TSan sees.
// Hand-offs through gRPC go through Debian's uninstrumented libgrpc, where TSan sees no
// synchronisation and reports races inside gRPC's own call objects; that is why the gRPC layer is
// not in the TSan run.
//
// Built twice: unit (librdkafka's mock cluster) and, with WAL_TEST_REAL_KAFKA, integration.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/common/metrics.h"
#include "server/common/namespace_key.h"
#include "server/kafka/admin.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"
#include "server/kafka/mock_cluster.h"
#include "server/kafka/producer.h"
#include "server/kafka/slot_ends.h"
#include "server/log/entry_reader.h"
#include "server/log/entry_writer.h"
#include "server/log/record_format.h"
#include "server/meta/meta_store.h"
#include "server/meta/pruner.h"
#include "tests/support/recording_sink.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

// Records of the core tests' writer: small, so that entries of a few KiB are split.
constexpr size_t kMaxRecordBytes = 1000;

using std::chrono::milliseconds;
using std::chrono::seconds;

class Core : public ::testing::Test {
 protected:
  static constexpr int kPartitions = 2;

  void SetUp() override {
    const std::string prefix = UniqueName("core");
    topic_ = prefix + "_0";
    const std::string meta_topic = prefix + "_meta";
    meta_topic_ = meta_topic;
    std::string brokers;
#ifdef WAL_TEST_REAL_KAFKA
    brokers = TestBrokers();
    ASSERT_FALSE(brokers.empty()) << kNoKafka;
#else
    auto cluster = MockCluster::Create(1);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    mock_ = std::move(*cluster);
    brokers = mock_->bootstrap_servers();
    ASSERT_TRUE(mock_->CreateTopic(topic_, kPartitions).ok());
    ASSERT_TRUE(mock_->CreateTopic(meta_topic, 1).ok());
#endif
    properties_ = {{"bootstrap.servers", brokers}};
    auto admin = NewKafkaClient(RD_KAFKA_PRODUCER, properties_);
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = std::move(*admin);
#ifdef WAL_TEST_REAL_KAFKA
    ASSERT_TRUE(EnsureTopics(admin_.get(),
                             {TopicSpec{topic_, kPartitions, 1, {}},
                              TopicSpec {
                                meta_topic,
                                1,
                                1,
                                {
                                  { "cleanup.policy",
                                    "compact" }
                                }
                              }},
                             Clock::now() + std::chrono::seconds(60))
                    .ok());
#endif
    for (int p = 0; p < kPartitions; ++p) slots_.push_back(Slot{topic_, p});

    auto meta =
        MetaStore::Open(properties_, slots_, {meta_topic, "core-test", std::chrono::seconds(60)});
    ASSERT_TRUE(meta.ok()) << meta.status();
    meta_ = std::move(*meta);

    WriterOptions writer_options;
    writer_options.producers = 2;
    writer_options.topics = {topic_};
    writer_options.append_timeout = seconds(20);
    writer_options.max_record_bytes = kMaxRecordBytes;
    KafkaProperties writer_properties = properties_;
    writer_properties["linger.ms"] = "1";
    auto writer = EntryWriter::Create(writer_properties, writer_options, "core-test");
    ASSERT_TRUE(writer.ok()) << writer.status();
    writer_ = std::move(*writer);

    ReaderOptions reader_options;
    NewReader(ReaderOptions().read_queue_bytes);
  }

  void NewReader(size_t read_queue_bytes,
                 uint64_t max_entry_bytes = ReaderOptions().max_entry_bytes) {
    ReaderOptions reader_options;
    reader_options.max_entry_bytes = max_entry_bytes;
    reader_options.batch_bytes = 4096;  // many small batches: more hand-offs per read
    reader_options.read_queue_bytes = read_queue_bytes;
    reader_ = std::make_unique<EntryReader>(properties_, reader_options, meta_.get(), &metrics_,
                                            "core-test");
  }

  void TearDown() override {
    reader_.reset();
    writer_.reset();
    meta_.reset();
    admin_.reset();
    mock_.reset();
  }

  Clock::time_point Deadline() const { return Clock::now() + seconds(30); }

  absl::StatusOr<NamespaceState> Create(uint64_t ns) {
    auto created = meta_->Create(
        ns,
        [this](const Slot& slot) -> absl::StatusOr<int64_t> {
          auto marks = QueryWatermarks(admin_.get(), slot.topic, slot.partition,
                                       Clock::now() + std::chrono::seconds(10));
          if (!marks.ok()) return marks.status();
          return marks->high;
        },
        Deadline());
    if (!created.ok()) return created.status();
    return created->first;
  }

  absl::StatusOr<std::vector<uint64_t>> Append(std::vector<AppendItem> items) {
    std::promise<absl::StatusOr<std::vector<uint64_t>>> done;
    writer_->Append(
        std::move(items), Deadline(),
        [&done](absl::StatusOr<std::vector<uint64_t>> ids) { done.set_value(std::move(ids)); });
    return done.get_future().get();
  }

  // Creates namespaces first_id.. first_id+3 and returns two of them that share a slot.
  std::pair<uint64_t, uint64_t> TwoInOneSlot(uint64_t first_id) {
    std::map<int32_t, std::vector<uint64_t>> by_partition;
    for (uint64_t ns = first_id; ns < first_id + 4; ++ns) {
      auto state = Create(ns);
      EXPECT_TRUE(state.ok()) << state.status();
      if (state.ok()) by_partition[state->slot.partition].push_back(ns);
    }
    for (const auto& [partition, ids] : by_partition) {
      if (ids.size() >= 2) return {ids[0], ids[1]};
    }
    ADD_FAILURE() << "no two namespaces share a slot";
    return {0, 0};
  }

  // Starts a read of `ns` from `start`; the caller waits on the sink.
  std::shared_ptr<RecordingSink> StartRead(uint64_t ns, uint64_t start = 0) {
    auto sink = std::make_shared<RecordingSink>();
    ReadParams params;
    params.namespace_id = ns;
    params.start_entry_id = start;
    params.deadline = Deadline();
    const absl::Status started = reader_->Start(params, sink);
    if (!started.ok()) sink->Finish(started);
    return sink;
  }

  std::unique_ptr<MockCluster> mock_;
  std::string topic_;
  std::string meta_topic_;
  KafkaProperties properties_;
  KafkaHandle admin_;
  std::vector<Slot> slots_;
  Metrics metrics_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<EntryWriter> writer_;
  std::unique_ptr<EntryReader> reader_;
};

// Every third entry is larger than kMaxRecordBytes, so it is split over several records.
std::string Payload(uint64_t ns, uint64_t seq) {
  return absl::StrCat("ns", ns, "-entry", seq, std::string(seq % 3 == 0 ? 2500 : 0, 's'));
}

// Writers, readers, truncations, an acquisition and (on real Kafka) pruning all at once; then
// every namespace holds exactly its acknowledged entries above its truncation point, in order.
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

#ifdef WAL_TEST_REAL_KAFKA
  // The pruner deletes below the lowest live first_entry_id of each slot, concurrently.
  Pruner pruner(meta_.get(), admin_.get(), slots_, seconds(3600), PruneMode::kDelete, &metrics_);
  std::thread pruning([&] {
    while (writing.load()) {
      const absl::Status s = pruner.RunOnce();
      EXPECT_TRUE(s.ok()) << s;
      std::this_thread::sleep_for(milliseconds(150));
    }
  });
#endif

  for (std::thread& t : writers) t.join();
  truncator.join();
  writing = false;
  for (std::thread& t : readers) t.join();
#ifdef WAL_TEST_REAL_KAFKA
  pruning.join();
#endif
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
            << metrics_.pruned_records.load() << " records pruned, " << metrics_.read_scans.load()
            << " scans, " << metrics_.read_scan_rewinds.load() << " rewinds\n";
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
  const uint64_t scans_before = metrics_.read_scans.load();
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
  EXPECT_EQ(metrics_.read_scans.load() - scans_before, 1u);
  EXPECT_GE(metrics_.read_scan_rewinds.load(), 1u);
}

// One read whose client stops pulling does not hold up the other reads of its slot: it is
// detached from the shared scan once its queue is full, and carries on by itself (from where it
// stood, nothing lost or repeated) once its client pulls again.
TEST_F(Core, AStalledReadDoesNotHoldUpTheOtherReadsOfItsSlot) {
  NewReader(64 << 10);  // a client 64 KiB behind leaves its scan
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

  // A follow read of `a` that takes its first batch and then stalls.
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
  EXPECT_GE(metrics_.read_scan_detaches.load(), 1u);

  // Once its client pulls again, the stalled read gets every entry once, in order, and (as a
  // following read) ends at its deadline.
  stalled->Stall(false);
  stalled->WaitForEntries(acked_a.size(), seconds(15));
  EXPECT_EQ(stalled->ids(), acked_a);
  const std::optional<absl::Status> ended = stalled->WaitFinished(seconds(15));
  ASSERT_TRUE(ended.has_value()) << "the follow read did not end by its deadline";
  EXPECT_TRUE(absl::IsDeadlineExceeded(*ended)) << *ended;
}

// 128 creations at once while every slot is being appended to: they share their queries of the
// slots' ends, and each new namespace still starts at or after the end its slot had when its
// creation began (an end from before the call could hand it a deleted namespace's records).
TEST_F(Core, ManyCreationsAtOnceShareEndQueriesAndNeverStartEarly) {
  std::vector<NamespaceState> busy;
  for (uint64_t ns = 1; ns <= 2 * slots_.size(); ++ns) {
    auto state = Create(ns);
    ASSERT_TRUE(state.ok()) << state.status();
    busy.push_back(*state);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> appended{0};
  std::atomic<bool> appender_failed{false};
  std::thread appender([&] {
    for (size_t i = 0; !stop; ++i) {
      const NamespaceState& to = busy[i % busy.size()];
      auto ids = Append({AppendItem{to.slot, to.namespace_id, "busy", EntryStamp{}}});
      EXPECT_TRUE(ids.ok()) << ids.status();
      if (!ids.ok()) {
        appender_failed = true;
        return;
      }
      ++appended;
    }
  });
  while (appended < 20 && !appender_failed) std::this_thread::sleep_for(milliseconds(5));

  SlotEnds ends(admin_.get());
  constexpr int kCreations = 128;
  std::vector<absl::Status> failures(kCreations);
  std::vector<NamespaceState> created(kCreations);
  std::vector<std::map<Slot, int64_t>> ends_before(kCreations);
  // The creations start together, once every thread has read its ends: started one by one as
  // the threads come up, they can each be over before the next begins (under ThreadSanitizer).
  std::mutex gate_mu;
  std::condition_variable gate;
  int at_gate = 0;
  std::vector<std::thread> creators;
  for (int i = 0; i < kCreations; ++i) {
    creators.emplace_back([&, i] {
      for (const Slot& slot : slots_) {
        auto marks = QueryWatermarks(admin_.get(), slot.topic, slot.partition,
                                     Clock::now() + std::chrono::seconds(10));
        if (!marks.ok()) failures[i] = marks.status();
        if (marks.ok()) ends_before[i][slot] = marks->high;
      }
      {
        std::unique_lock<std::mutex> lock(gate_mu);
        if (++at_gate == kCreations) gate.notify_all();
        gate.wait(lock, [&] { return at_gate == kCreations; });
      }
      if (!failures[i].ok()) return;
      auto state = meta_->Create(
          1000 + i, [&](const Slot& slot) { return ends.Get(slot, Deadline()); }, Deadline());
      if (!state.ok()) {
        failures[i] = state.status();
        return;
      }
      EXPECT_TRUE(state->second) << "namespace " << 1000 + i << " existed already";
      created[i] = state->first;
    });
  }
  for (auto& t : creators) t.join();
  stop = true;
  appender.join();

  for (int i = 0; i < kCreations; ++i) {
    ASSERT_TRUE(failures[i].ok()) << "creation " << i << ": " << failures[i];
    const NamespaceState& state = created[i];
    EXPECT_GE(state.start_offset, ends_before[i][state.slot])
        << "namespace " << state.namespace_id << " starts before the end its slot had when its "
        << "creation began";
    ASSERT_TRUE(meta_->Get(state.namespace_id).has_value());
  }
  EXPECT_GT(ends.queries(), 0u);
  EXPECT_LT(ends.queries(), static_cast<uint64_t>(kCreations)) << "no query was shared";
}

// A namespace id whose 8 key bytes spell "prune/.." is a namespace like any other, not a record
// of the pruner (whose keys are longer).
TEST_F(Core, ANamespaceWhoseKeyBeginsLikeAPruneRecordCanBeCreated) {
  constexpr uint64_t kId = 0x7072756e652f0001;  // "prune/\0\1"
  ASSERT_EQ(EncodeKey(kId).substr(0, 6), "prune/");
  auto state = Create(kId);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(meta_->Get(kId).has_value());
  auto ids = Append({AppendItem{state->slot, kId, "x", EntryStamp{}}});
  ASSERT_TRUE(ids.ok()) << ids.status();
  auto entries = StartRead(kId)->Wait(seconds(30));
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].data(), "x");
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

// The kinds of the metadata records of one namespace, in offset order, read from the topic.
std::vector<meta::v1::NamespaceRecord::Kind> KindsOf(const KafkaProperties& properties,
                                                     const std::string& meta_topic, uint64_t id) {
  std::vector<meta::v1::NamespaceRecord::Kind> kinds;
  auto consumer = Consumer::Create(properties, "kinds-of");
  if (!consumer.ok() || !(*consumer)->Assign(meta_topic, 0, 0).ok()) return kinds;
  const std::string key = EncodeKey(id);
  const auto give_up = Clock::now() + seconds(10);
  while (Clock::now() < give_up) {
    Message msg = (*consumer)->Poll(100);
    if (!msg) continue;
    if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) break;
    if (msg->err || msg->key_len != key.size() || std::memcmp(msg->key, key.data(), key.size())) {
      continue;
    }
    meta::v1::NamespaceRecord record;
    if (record.ParseFromArray(msg->payload, static_cast<int>(msg->len))) {
      kinds.push_back(record.kind());
    }
  }
  return kinds;
}

// A truncation written from a view that had not seen the namespace's deletion lands after the
// DELETE. Ignored in memory, it would still be the key's latest record, and once compaction
// drops the DELETE a restarting server would bring the namespace back: so the deletion is
// restated after it.
TEST_F(Core, ARecordFromAStaleViewAfterADeleteIsFollowedByTheDeletionAgain) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(meta_->Delete(1, Deadline()).ok());

  NamespaceState stale = *state;
  stale.truncated_before = state->start_offset + 1;
  const std::string value =
      MakeRecord(meta::v1::NamespaceRecord::TRUNCATE, stale, "stale-server").SerializeAsString();
  const auto written =
      ProduceRaw(properties_.at("bootstrap.servers"), meta_topic_, 0, EncodeKey(1), value);
  ASSERT_TRUE(written.ok()) << written.status();

  using Kind = meta::v1::NamespaceRecord;
  std::vector<Kind::Kind> kinds;
  const auto give_up = Clock::now() + seconds(15);
  do {
    std::this_thread::sleep_for(milliseconds(200));
    kinds = KindsOf(properties_, meta_topic_, 1);
  } while (kinds.size() < 4 && Clock::now() < give_up);
  ASSERT_EQ(kinds.size(), 4u) << "the deletion was not restated";
  // Nothing more may follow: a store whose table holds a stale latest record writes the
  // restatement before its Open returns, and a second store reads the same four records into
  // the same table as the first one did.
  auto second = MetaStore::Open(properties_, slots_, {meta_topic_, "core-test-2", seconds(60)});
  ASSERT_TRUE(second.ok()) << second.status();
  kinds = KindsOf(properties_, meta_topic_, 1);
  EXPECT_EQ(kinds,
            (std::vector<Kind::Kind>{Kind::CREATE, Kind::DELETE, Kind::TRUNCATE, Kind::DELETE}));
  EXPECT_FALSE(meta_->Get(1).has_value());
}

// The first chunk of a split entry whose other chunks never come (its writer failed), then more
// than twice max_entry_bytes of complete entries of another writer: a read holds no more than
// that behind it. It ends with UNAVAILABLE naming the entry to read again from, having
// delivered everything before it, and lost nothing.
TEST_F(Core, AReadHoldsBackABoundedAmountBehindAnIncompleteEntry) {
  NewReader(ReaderOptions().read_queue_bytes, /*max_entry_bytes=*/8192);
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
      ProduceRaw(properties_.at("bootstrap.servers"), state->slot.topic, state->slot.partition,
                 EncodeKey(1), torn[0]);
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

// A fatal error of the metadata producer (its idempotent sequence state, say) no longer fails
// every namespace change until a restart: the next change replaces the producer.
TEST_F(Core, AFatalMetaProducerErrorReplacesTheProducer) {
  ASSERT_TRUE(Create(1).ok());
  const Producer* before = meta_->producer();
  ASSERT_EQ(
      rd_kafka_test_fatal_error(before->handle(), RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                                "injected by the test"),
      RD_KAFKA_RESP_ERR_NO_ERROR);
  const auto give_up = Clock::now() + seconds(5);
  while (!before->fatal() && Clock::now() < give_up) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_TRUE(before->fatal());
  auto created = Create(2);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(meta_->producer_replacements(), 1u);
  EXPECT_NE(meta_->producer(), before);
  EXPECT_TRUE(meta_->Get(2).has_value());
}

#ifndef WAL_TEST_REAL_KAFKA
// A change waits until the tail has read its record back. While the tail cannot fetch, that
// wait ends at once when shutdown calls FailPending, not at the call's deadline.
TEST_F(Core, FailPendingEndsAChangeWaitingForTheTail) {
  ASSERT_TRUE(Create(1).ok());
  rd_kafka_mock_cluster_t* cluster = mock_->cluster();
  constexpr int16_t kFetchApiKey = 1;
  // Every fetch fails from now on (far more errors than the test lasts); producing works.
  std::vector<rd_kafka_resp_err_t> errors(100000, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION);
  rd_kafka_mock_push_request_errors_array(cluster, kFetchApiKey, errors.size(), errors.data());
  auto waiting = std::async(std::launch::async, [&] { return Create(2); });
  ASSERT_EQ(waiting.wait_for(seconds(2)), std::future_status::timeout)
      << "the change did not wait for the tail: " << waiting.get().status();
  meta_->FailPending();
  ASSERT_EQ(waiting.wait_for(seconds(2)), std::future_status::ready)
      << "FailPending left the change waiting";
  const auto created = waiting.get();
  EXPECT_TRUE(absl::IsDeadlineExceeded(created.status())) << created.status();
  rd_kafka_mock_clear_request_errors(cluster, kFetchApiKey);
}

// librdkafka's queue fills up in the middle of an append: the records before are on their way,
// so the call must not answer RESOURCE_EXHAUSTED (which promises nothing was written).
TEST_F(Core, AQueueFullMidAppendIsNotResourceExhausted) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  KafkaProperties small_queue = properties_;
  small_queue["queue.buffering.max.messages"] = "3";
  small_queue["linger.ms"] = "1000";  // the records stay queued
  WriterOptions options;
  options.producers = 1;
  options.topics = {topic_};
  auto writer = EntryWriter::Create(small_queue, options, "queue-full");
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto append = [&](int entries) {
    std::vector<AppendItem> items;
    for (int i = 0; i < entries; ++i) items.push_back(AppendItem{state->slot, 1, "e", {}});
    std::promise<absl::Status> done;
    (*writer)->Append(std::move(items), Deadline(), [&](absl::StatusOr<std::vector<uint64_t>> ids) {
      done.set_value(ids.status());
    });
    return done.get_future().get();
  };
  const absl::Status partly = append(5);  // 3 queued, the 4th refused
  EXPECT_TRUE(absl::IsUnavailable(partly)) << partly;
  EXPECT_TRUE(absl::StrContains(partly.message(), "same sequences")) << partly;
}

// A fatal idempotent-producer error with a record still queued: the next append replaces the
// producer, the queued append fails with UNAVAILABLE (its outcome is known: never written), and
// the next one is written by the new producer.
TEST_F(Core, FatalProducerErrorFailsTheQueuedAppendWithUnavailable) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(Append({AppendItem{state->slot, 1, "before", EntryStamp{0, 1, 1}}}).ok());

  rd_kafka_mock_cluster_t* cluster = mock_->cluster();
  ASSERT_EQ(rd_kafka_mock_broker_set_down(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  std::promise<absl::Status> queued;
  writer_->Append(
      {AppendItem{state->slot, 1, "queued", EntryStamp{0, 1, 2}}}, Deadline(),
      [&](absl::StatusOr<std::vector<uint64_t>> ids) { queued.set_value(ids.status()); });
  // Append handed the record to librdkafka before it returned; with the broker down, it stays
  // queued.
  const absl::Status injected = InjectFatalProducerErrors(*writer_);
  ASSERT_TRUE(injected.ok()) << injected;

  std::promise<absl::StatusOr<std::vector<uint64_t>>> after;
  writer_->Append(
      {AppendItem{state->slot, 1, "after", EntryStamp{0, 1, 3}}}, Deadline(),
      [&](absl::StatusOr<std::vector<uint64_t>> ids) { after.set_value(std::move(ids)); });
  auto queued_status = queued.get_future();
  ASSERT_EQ(queued_status.wait_for(seconds(10)), std::future_status::ready);
  const absl::Status queued_result = queued_status.get();
  EXPECT_TRUE(absl::IsUnavailable(queued_result)) << queued_result;
  EXPECT_EQ(writer_->replacements(), 1u);

  ASSERT_EQ(rd_kafka_mock_broker_set_up(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  auto after_ids = after.get_future().get();
  ASSERT_TRUE(after_ids.ok()) << after_ids.status();
  auto entries = StartRead(1)->Wait(seconds(30));
  ASSERT_TRUE(entries.ok()) << entries.status();
  std::vector<std::string> data;
  for (const v1::Entry& e : *entries) data.push_back(e.data());
  EXPECT_EQ(data, (std::vector<std::string>{"before", "after"}));
}
#endif

}  // namespace
}  // namespace wal::testing
