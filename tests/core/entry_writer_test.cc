// The writer (log/entry_writer.h) when Kafka does not answer, librdkafka's queue fills or its
// producer fails: faults the mock cluster injects (unit_core_test only).
#include <future>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "tests/core/core_fixture.h"

namespace wal::testing {
namespace {

// librdkafka's queue fills up in the middle of an append: the records before are on their way,
// so the call must not answer RESOURCE_EXHAUSTED (which promises nothing was written).
TEST_F(Core, AQueueFullMidAppendIsNotResourceExhausted) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  KafkaProperties small_queue = properties();
  small_queue["queue.buffering.max.messages"] = "3";
  small_queue["linger.ms"] = "1000";  // the records stay queued
  WriterOptions options;
  options.producers = 1;
  options.topics = {topic()};
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

// With Kafka down, an append is answered UNAVAILABLE a little before its caller's deadline (a
// tenth of the time left, at most 500 ms: server/common/deadline.h), not at the writer's
// append_timeout (20 s here): the caller hears that the outcome is unknown instead of timing out
// blind. The answer's time is taken on the thread that answers, with no gRPC hop to wait for.
TEST_F(Core, AnAppendKafkaDoesNotAnswerIsAnsweredJustBeforeItsCallersDeadline) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  rd_kafka_mock_cluster_t* cluster = core_->mock_cluster()->cluster();
  ASSERT_EQ(rd_kafka_mock_broker_set_down(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  const Clock::time_point deadline = Clock::now() + seconds(5);
  // Shared with the callback: a writer that answered after the wait below gave up would
  // otherwise set a promise gone with the test's frame.
  auto answer = std::make_shared<std::promise<std::pair<absl::Status, Clock::time_point>>>();
  auto answered_future = answer->get_future();
  writer_->Append({AppendItem{state->slot, 1, "down", EntryStamp{0, 1, 1}}}, deadline,
                  [answer](absl::StatusOr<std::vector<uint64_t>> ids) {
                    answer->set_value({ids.status(), Clock::now()});
                  });
  ASSERT_EQ(answered_future.wait_for(seconds(30)), std::future_status::ready) << "never answered";
  const auto [status, answered] = answered_future.get();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  const int64_t ahead_ms =
      std::chrono::duration_cast<milliseconds>(deadline - answered).count();  // 500 planned
  EXPECT_GT(ahead_ms, 0) << "answered after its caller's deadline";
  EXPECT_LT(ahead_ms, 1000) << "answered long before its caller's deadline";
  ASSERT_EQ(rd_kafka_mock_broker_set_up(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
}

// A fatal idempotent-producer error with a record still queued: the next append replaces the
// producer, the queued append fails with UNAVAILABLE (its outcome is known: never written), and
// the next one is written by the new producer.
TEST_F(Core, FatalProducerErrorFailsTheQueuedAppendWithUnavailable) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(Append({AppendItem{state->slot, 1, "before", EntryStamp{0, 1, 1}}}).ok());

  rd_kafka_mock_cluster_t* cluster = core_->mock_cluster()->cluster();
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

// Group commit: with one group of a slot in flight, the entries that arrive for the slot wait,
// and leave together when it is reported, packed into one record: they share its offset.
TEST_F(Core, EntriesArrivingWhileTheSlotsGroupIsInFlightLeavePackedTogether) {
  const auto [a, b] = TwoInOneSlot(1);
  ASSERT_NE(a, 0u);
  auto state = Create(a);
  ASSERT_TRUE(state.ok()) << state.status();
  auto writer = OneGroupPerSlotWriter("gather");
  ASSERT_TRUE(writer.ok()) << writer.status();
  rd_kafka_mock_cluster_t* cluster = core_->mock_cluster()->cluster();
  ASSERT_EQ(rd_kafka_mock_broker_set_down(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  std::vector<std::promise<absl::StatusOr<std::vector<uint64_t>>>> done(3);
  auto append = [&](uint64_t ns, std::string_view data, int call) {
    (*writer)->Append({AppendItem{state->slot, ns, data, {}}}, Deadline(),
                      [&done, call](absl::StatusOr<std::vector<uint64_t>> ids) {
                        done[call].set_value(std::move(ids));
                      });
  };
  append(a, "in flight", 0);  // the slot's group: held by the broker being down
  append(a, "waits", 1);      // queued behind it (Append queues before it returns)
  append(b, "waits too", 2);
  ASSERT_EQ(rd_kafka_mock_broker_set_up(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  std::vector<uint64_t> ids;
  for (auto& d : done) {
    auto result = d.get_future().get();
    ASSERT_TRUE(result.ok()) << result.status();
    ids.push_back((*result)[0]);
  }
  EXPECT_EQ(ids[1], ids[0] + 1);
  EXPECT_EQ(ids[2], ids[1]);
  EXPECT_EQ((*writer)->packed_records(), 1u);
  EXPECT_EQ((*writer)->packed_entries(), 2u);
}

// Shutting down with entries queued behind a group in flight: every call is answered, the
// queued one with UNAVAILABLE saying nothing was written.
TEST_F(Core, FailPendingAnswersTheEntriesQueuedBehindAGroupInFlight) {
  auto state = Create(1);
  ASSERT_TRUE(state.ok()) << state.status();
  auto writer = OneGroupPerSlotWriter("fail-queued");
  ASSERT_TRUE(writer.ok()) << writer.status();
  rd_kafka_mock_cluster_t* cluster = core_->mock_cluster()->cluster();
  ASSERT_EQ(rd_kafka_mock_broker_set_down(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  std::promise<absl::Status> in_flight, queued;
  (*writer)->Append(
      {AppendItem{state->slot, 1, "in flight", {}}}, Deadline(),
      [&](absl::StatusOr<std::vector<uint64_t>> ids) { in_flight.set_value(ids.status()); });
  (*writer)->Append(
      {AppendItem{state->slot, 1, "queued", {}}}, Deadline(),
      [&](absl::StatusOr<std::vector<uint64_t>> ids) { queued.set_value(ids.status()); });
  auto queued_result = queued.get_future();
  (*writer)->FailPending();
  ASSERT_EQ(queued_result.wait_for(seconds(10)), std::future_status::ready);
  const absl::Status queued_status = queued_result.get();
  EXPECT_TRUE(absl::IsUnavailable(queued_status)) << queued_status;
  EXPECT_TRUE(absl::StrContains(queued_status.message(), "nothing was written")) << queued_status;
  auto in_flight_result = in_flight.get_future();
  ASSERT_EQ(in_flight_result.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(absl::IsUnavailable(in_flight_result.get()));
  writer->reset();
  ASSERT_EQ(rd_kafka_mock_broker_set_up(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
}

}  // namespace
}  // namespace wal::testing
