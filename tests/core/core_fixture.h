// The fixture of the core tests (tests/core/): the core of a walserver (server/wal_core.h),
// built by the same code as walserver's, with no gRPC in between. Each test file drives one
// component from many threads at once and checks the results.
//
// Their other purpose is ThreadSanitizer (scripts/test.sh runs the *_core_test tests in a
// -DWAL_SANITIZE=thread build). Every hand-off in these tests goes through our own locks or
// librdkafka's (routed to pthreads, see server/kafka/tsan_c11_threads.cc), which TSan sees.
// Hand-offs through gRPC go through Debian's uninstrumented libgrpc, where TSan sees no
// synchronisation and reports races inside gRPC's own call objects; that is why the gRPC layer is
// not in the TSan run.
//
// Run twice: on librdkafka's mock cluster (unit_core_test) and on real Kafka
// (integration_core_test), two executables that link the same objects; OnRealKafka() says which.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/kafka/admin.h"
#include "server/wal_core.h"
#include "tests/support/kafka_mode.h"
#include "tests/support/recording_sink.h"
#include "tests/support/test_util.h"

namespace wal::testing {

// Records of the core tests' writer: small, so that entries of a few KiB are split.
inline constexpr size_t kMaxRecordBytes = 1024;

class Core : public ::testing::Test {
 protected:
  using milliseconds = std::chrono::milliseconds;
  using seconds = std::chrono::seconds;

  static constexpr int kPartitions = 2;

  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartCore(ReaderOptions().read_queue_bytes)); }
  void TearDown() override { core_.reset(); }

  // (Re)starts the core on topics of its own, with a reader whose queue holds
  // `read_queue_bytes` and whose largest entry is `max_entry_bytes` (0: walserver's default).
  // Call it as ASSERT_NO_FATAL_FAILURE(StartCore(...)): a core that does not start leaves the
  // test with none.
  void StartCore(size_t read_queue_bytes, uint64_t max_entry_bytes = 0) {
    meta_ = nullptr;
    writer_ = nullptr;
    reader_ = nullptr;
    core_.reset();
    ServerOptions o;
    if (OnRealKafka()) {
      o.brokers = TestBrokers();
      ASSERT_FALSE(o.brokers.empty()) << kNoKafka;
    }
    prefix_ = UniqueName("core");
    o.topic_prefix = prefix_;
    o.topic_count = 1;
    o.partitions_per_topic = kPartitions;
    o.replication_factor = 1;
    o.min_insync_replicas = 1;
    o.producers = 2;
    o.append_timeout = seconds(20);
    o.max_record_bytes = kMaxRecordBytes;
    o.max_entry_bytes = max_entry_bytes;
    o.startup_timeout = seconds(60);
    o.name = "core-test";
    ReaderOptions tuning;
    tuning.batch_bytes = 4096;  // many small batches: more hand-offs per read
    tuning.read_queue_bytes = read_queue_bytes;
    tuning.acknowledged_end = acknowledged_end_;
    auto core = WalCore::Start(o, tuning);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    meta_ = &core_->meta();
    writer_ = &core_->writer();
    reader_ = &core_->reader();
  }

  std::string topic() const { return prefix_ + "_0"; }
  std::string meta_topic() const { return prefix_ + "_meta"; }
  const KafkaProperties& properties() const { return core_->kafka(); }
  const std::string& bootstrap() const { return core_->kafka().at("bootstrap.servers"); }
  const std::vector<Slot>& slots() const { return core_->slots(); }
  Metrics& metrics() { return core_->metrics(); }

  Clock::time_point Deadline() const { return Clock::now() + seconds(30); }

  absl::StatusOr<NamespaceState> Create(uint64_t ns) {
    auto created = meta_->Create(
        ns, std::nullopt,
        [this](const Slot& slot) -> absl::StatusOr<int64_t> {
          auto marks = QueryWatermarks(core_->admin(), slot, Clock::now() + seconds(10));
          if (!marks.ok()) return marks.status();
          return marks->high;
        },
        Deadline());
    if (!created.ok()) return created.status();
    return created->first;
  }

  // Appends through `writer` (the core's when null) and waits for the answer.
  absl::StatusOr<std::vector<uint64_t>> Append(std::vector<AppendItem> items,
                                               EntryWriter* writer = nullptr) {
    std::promise<absl::StatusOr<std::vector<uint64_t>>> done;
    (writer != nullptr ? writer : writer_)
        ->Append(std::move(items), Deadline(), [&done](absl::StatusOr<std::vector<uint64_t>> ids) {
          done.set_value(std::move(ids));
        });
    return done.get_future().get();
  }

  // A writer of one producer on the core's topic whose slots keep one group in flight, so that
  // entries gather behind it (log/entry_writer.h).
  absl::StatusOr<std::unique_ptr<EntryWriter>> OneGroupPerSlotWriter(const std::string& name) {
    WriterOptions options;
    options.producers = 1;
    options.max_record_bytes = kMaxRecordBytes;
    options.topics = {topic()};
    options.slot_flushes_in_flight = 1;
    return EntryWriter::Create(properties(), options, name);
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

  // Stands in for the writer's acknowledged ends of the reader started next (null: the
  // writer's own).
  std::function<int64_t(const Slot&)> acknowledged_end_;
  std::unique_ptr<WalCore> core_;
  std::string prefix_;
  MetaStore* meta_ = nullptr;
  EntryWriter* writer_ = nullptr;
  EntryReader* reader_ = nullptr;
};

// Every third entry is larger than kMaxRecordBytes, so it is split over several records.
inline std::string Payload(uint64_t ns, uint64_t seq) {
  return absl::StrCat("ns", ns, "-entry", seq, std::string(seq % 3 == 0 ? 2500 : 0, 's'));
}

}  // namespace wal::testing
