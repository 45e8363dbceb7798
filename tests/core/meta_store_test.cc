// The namespace table (meta/meta_store.h): concurrent creations, keys, records written from
// stale views, and its producer's failures.
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "server/common/namespace_key.h"
#include "server/kafka/consumer.h"
#include "server/kafka/producer.h"
#include "server/kafka/slot_ends.h"
#include "tests/core/core_fixture.h"

namespace wal::testing {
namespace {

// The kinds of the metadata records of one namespace, in offset order, read from the topic.
std::vector<meta::v1::NamespaceRecord::Kind> KindsOf(const KafkaProperties& properties,
                                                     const std::string& meta_topic, uint64_t id) {
  std::vector<meta::v1::NamespaceRecord::Kind> kinds;
  auto consumer = Consumer::Create(properties, "kinds-of");
  if (!consumer.ok() || !(*consumer)->Assign(meta_topic, 0, 0).ok()) return kinds;
  const std::string key = EncodeKey(id);
  const auto give_up = Clock::now() + std::chrono::seconds(10);
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

// 128 creations at once while every slot is being appended to: they share their queries of the
// slots' ends, and each new namespace still starts at or after the end its slot had when its
// creation began (an end from before the call could hand it a deleted namespace's records).
TEST_F(Core, ManyCreationsAtOnceShareEndQueriesAndNeverStartEarly) {
  std::vector<NamespaceState> busy;
  for (uint64_t ns = 1; ns <= 2 * slots().size(); ++ns) {
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

  SlotEnds ends(core_->admin());
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
      for (const Slot& slot : slots()) {
        auto marks = QueryWatermarks(core_->admin(), slot, Clock::now() + std::chrono::seconds(10));
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
          1000 + i, std::nullopt, [&](const Slot& slot) { return ends.Get(slot, Deadline()); },
          Deadline());
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
  const auto written = ProduceRaw(bootstrap(), meta_topic(), 0, EncodeKey(1), value);
  ASSERT_TRUE(written.ok()) << written.status();

  using Kind = meta::v1::NamespaceRecord;
  std::vector<Kind::Kind> kinds;
  const auto give_up = Clock::now() + seconds(15);
  do {
    std::this_thread::sleep_for(milliseconds(200));
    kinds = KindsOf(properties(), meta_topic(), 1);
  } while (kinds.size() < 4 && Clock::now() < give_up);
  ASSERT_EQ(kinds.size(), 4u) << "the deletion was not restated";
  // Nothing more may follow. The first store would write more only if applying the restated
  // DELETE left the namespace's latest record stale (NamespaceTable::Apply). A second store
  // applies the same four records with the same code, and before its Open returns it restates
  // every namespace whose latest record is stale: so if the table were left stale, a fifth
  // record would be there now.
  auto second = MetaStore::Open(properties(), slots(), {meta_topic(), "core-test-2", seconds(60)});
  ASSERT_TRUE(second.ok()) << second.status();
  kinds = KindsOf(properties(), meta_topic(), 1);
  EXPECT_EQ(kinds,
            (std::vector<Kind::Kind>{Kind::CREATE, Kind::DELETE, Kind::TRUNCATE, Kind::DELETE}));
  EXPECT_FALSE(meta_->Get(1).has_value());
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

}  // namespace
}  // namespace wal::testing
