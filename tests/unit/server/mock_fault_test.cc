// Faults injected with librdkafka's mock cluster, under an in-process walserver.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "absl/strings/str_join.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;
// Kafka protocol API key of Produce requests (librdkafka keeps its names internal).
constexpr int16_t kProduceApiKey = 0;
constexpr int16_t kListOffsetsApiKey = 2;

// Each test runs its own walserver on a mock cluster of its own.
class MockFaults : public ::testing::Test {
 protected:
  // Starts server_ with `options` (on topics of its own).
  void StartServer(ServerOptions options) {
    options.topic_prefix = UniqueName("fault");
    auto server = WalServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  rd_kafka_mock_cluster_t* cluster() const { return server_->mock_cluster()->cluster(); }
  // A client of server_ that does not retry, so that it sees every answer.
  std::unique_ptr<Client> ClientWithoutRetries(std::chrono::milliseconds timeout) const {
    ClientOptions options;
    options.target = server_->address();
    options.timeout = timeout;
    options.max_retries = 0;
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::unique_ptr<WalServer> server_;
};

TEST_F(MockFaults, CallsFailFastWhileKafkaIsDownAndWorkAgainAfter) {
  ServerOptions options = MockServerOptions();
  // walserver gives up on Kafka after --append_timeout_ms, or a tenth of the caller's deadline
  // before it (at most 500 ms), whichever comes first. The second alone left too little room on
  // a loaded CI machine: twice the client's deadline passed before an answer sent 200 ms (TSan)
  // and 500 ms ahead of it arrived. So the append's answer here comes from the first, 3 s before
  // the deadline, and the read's halfway to it. During the outage a client without retries
  // asks, so that what is checked is walserver's answer (a retried read's last try has less
  // room).
  options.append_timeout = seconds(2);
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  const auto timeout = seconds(5);
  auto client = Connect(server_->address(), timeout);
  auto once = ClientWithoutRetries(timeout);
  ASSERT_NE(once, nullptr);
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  auto before = client->Append(1, {"before"});
  ASSERT_TRUE(before.ok()) << before.status();

  rd_kafka_mock_cluster_t* cluster = this->cluster();
  ASSERT_EQ(rd_kafka_mock_broker_set_down(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);

  auto t0 = Clock::now();
  auto during = once->Append(1, {"during"});
  EXPECT_EQ(during.status().code(), absl::StatusCode::kUnavailable) << during.status();
  EXPECT_LT(Clock::now() - t0, timeout) << "must answer before the deadline";

  t0 = Clock::now();
  auto read = once->ReadAll(1);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnavailable) << read.status();
  EXPECT_LT(Clock::now() - t0, timeout);

  ASSERT_EQ(rd_kafka_mock_broker_set_up(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  absl::StatusOr<std::vector<uint64_t>> after;
  const auto deadline = Clock::now() + seconds(30);
  do {
    after = client->Append(1, {"after"});
  } while (!after.ok() && Clock::now() < deadline);
  ASSERT_TRUE(after.ok()) << after.status();
  auto all = client->ReadAll(1);
  ASSERT_TRUE(all.ok()) << all.status();
  // "during" may or may not have been written: its outcome was reported as unknown.
  ASSERT_GE(all->size(), 2u);
  EXPECT_EQ(all->front().data(), "before");
  EXPECT_EQ(all->back().data(), "after");
}

TEST_F(MockFaults, AppendBytesInFlightAreCapped) {
  ServerOptions options = MockServerOptions();
  options.max_entry_bytes = 64 * 1024;
  options.max_inflight_append_bytes = 64 * 1024;
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  auto client = Connect(server_->address(), seconds(3));
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  // With the broker down, a 40 KiB append stays in flight until its deadline...
  rd_kafka_mock_cluster_t* cluster = this->cluster();
  ASSERT_EQ(rd_kafka_mock_broker_set_down(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  std::promise<absl::Status> first;
  v1::AppendRequest big;
  auto* e = big.add_entries();
  e->set_namespace_id(1);
  e->set_data(std::string(40 * 1024, 'a'));
  client->AppendAsync(
      big, [&](absl::StatusOr<std::vector<uint64_t>> r) { first.set_value(r.status()); });
  // Wait until walserver holds it (a fixed sleep lost this race on a loaded machine).
  const Metrics& metrics = server_->metrics();
  const auto held_by = Clock::now() + seconds(2);
  while (metrics.appends_in_flight.load() == 0 && Clock::now() < held_by) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(metrics.appends_in_flight.load(), 1) << "the first append never reached walserver";
  // ...so a second one would pass the cap and is refused at once, writing nothing.
  const auto t0 = Clock::now();
  v1::AppendRequest refused = big;
  refused.mutable_entries(0)->set_data(std::string(40 * 1024, 'b'));
  auto second = client->Append(refused);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  EXPECT_NE(second.status().message().find("max_inflight_append_bytes"), absl::string_view::npos);
  EXPECT_LT(Clock::now() - t0, seconds(1));
  // Its outcome is unknown: walserver answers UNAVAILABLE a little before the deadline, or, on
  // a loaded machine, the client's own deadline comes first.
  const absl::Status first_status = first.get_future().get();
  EXPECT_TRUE(absl::IsUnavailable(first_status) || absl::IsDeadlineExceeded(first_status))
      << first_status;
  // Once the first one is over, its bytes are free again.
  ASSERT_EQ(rd_kafka_mock_broker_set_up(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  absl::StatusOr<std::vector<uint64_t>> after;
  const auto deadline = Clock::now() + seconds(30);
  do {
    after = client->Append(big);
  } while (!after.ok() && Clock::now() < deadline);
  EXPECT_TRUE(after.ok()) << after.status();
  auto all = client->ReadAll(1);
  ASSERT_TRUE(all.ok()) << all.status();
  for (const auto& entry : *all)
    EXPECT_EQ(entry.data()[0], 'a') << "the refused append was written";
}

// An append answered before Kafka reported its records (its caller's deadline came first) still
// holds its bytes while librdkafka holds the records: retries of it must meet the cap, or a slow
// Kafka lets retrying clients queue copies past it.
TEST_F(MockFaults, AnAppendAnsweredBeforeItsRecordsAreReportedStillCountsAgainstTheCap) {
  ServerOptions options = MockServerOptions();
  options.max_entry_bytes = 64 * 1024;
  options.max_inflight_append_bytes = 64 * 1024;
  options.append_timeout = seconds(6);  // how long librdkafka keeps the records
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  auto admin = Connect(server_->address(), seconds(5));
  ASSERT_TRUE(admin->CreateNamespace(1).ok());
  rd_kafka_mock_cluster_t* cluster = this->cluster();
  ASSERT_EQ(rd_kafka_mock_broker_set_down(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  auto client = ClientWithoutRetries(seconds(1));
  ASSERT_NE(client, nullptr);
  v1::AppendRequest big;
  auto* e = big.add_entries();
  e->set_namespace_id(1);
  e->set_data(std::string(40 * 1024, 'a'));
  const auto sent = Clock::now();
  auto first = client->Append(big);
  ASSERT_FALSE(first.ok());
  ASSERT_LT(Clock::now() - sent, seconds(3)) << "answered after librdkafka gave the records up";
  // Its records are still in librdkafka's queue for seconds: a retry must be refused.
  auto retry = client->Append(big);
  EXPECT_EQ(retry.status().code(), absl::StatusCode::kResourceExhausted) << retry.status();
  // Once librdkafka has reported them (delivered when the broker is back), the bytes are free.
  ASSERT_EQ(rd_kafka_mock_broker_set_up(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  absl::StatusOr<std::vector<uint64_t>> after;
  const auto deadline = Clock::now() + seconds(30);
  do {
    after = admin->Append(big);
  } while (!after.ok() && Clock::now() < deadline);
  EXPECT_TRUE(after.ok()) << after.status();
}

// Appends naming an unknown namespace make walserver catch up with the metadata topic (an
// end-of-topic query, then reading up to it) before answering NOT_FOUND. During a Kafka slowdown
// a client retrying appends to a deleted namespace must not take the threads of the admin calls,
// nor ask Kafka once per append.
TEST_F(MockFaults, AppendsToAnUnknownNamespaceDuringASlowdownShareOneCatchUp) {
  ServerOptions options = MockServerOptions();
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  auto admin = Connect(server_->address(), seconds(3));
  ASSERT_TRUE(admin->CreateNamespace(1).ok());
  // Every end-of-topic query now takes 1.5 s.
  rd_kafka_mock_cluster_t* cluster = this->cluster();
  constexpr size_t kSlowQueries = 200;
  for (size_t i = 0; i < kSlowQueries; ++i) {
    ASSERT_EQ(rd_kafka_mock_broker_push_request_error_rtts(cluster, 1, kListOffsetsApiKey, 1,
                                                           RD_KAFKA_RESP_ERR_NO_ERROR, 1500),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  auto client = ClientWithoutRetries(seconds(8));
  ASSERT_NE(client, nullptr);
  constexpr int kAppends = 100;  // more than the 64 admin threads
  std::mutex mu;
  std::condition_variable cv;
  std::vector<absl::Status> answers;
  v1::AppendRequest unknown;
  unknown.add_entries()->set_namespace_id(99);
  unknown.mutable_entries(0)->set_data("x");
  const auto sent = Clock::now();
  for (int i = 0; i < kAppends; ++i) {
    client->AppendAsync(unknown, [&](absl::StatusOr<std::vector<uint64_t>> r) {
      std::lock_guard<std::mutex> lock(mu);
      answers.push_back(r.status());
      cv.notify_all();
    });
  }
  // Wait until walserver has asked Kafka at least once.
  const auto asked_by = Clock::now() + seconds(5);
  size_t left = kSlowQueries;
  while (left == kSlowQueries && Clock::now() < asked_by) {
    rd_kafka_mock_broker_error_stack_cnt(cluster, 1, kListOffsetsApiKey, &left);
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_LT(left, kSlowQueries) << "walserver never looked the unknown namespace up";
  // An admin call that needs no end-of-topic query gets a thread at once, not after a query.
  const auto delete_sent = Clock::now();
  const absl::Status deleted = admin->DeleteNamespace(1);
  EXPECT_TRUE(deleted.ok()) << deleted;
  EXPECT_LT(Clock::now() - delete_sent, milliseconds(1200))
      << "the admin call waited behind the appends";
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, seconds(20), [&] { return answers.size() == kAppends; }));
  }
  // Two rounds of 1.5 s at most (the one the first append began, then one for all the others)
  // fit in each append's 8 s.
  for (const absl::Status& s : answers) EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_LT(Clock::now() - sent, seconds(8));
  rd_kafka_mock_broker_error_stack_cnt(cluster, 1, kListOffsetsApiKey, &left);
  EXPECT_LE(kSlowQueries - left, 5u) << "end-of-topic queries for " << kAppends << " appends";
}

// Shutdown while streamed appends wait on everything an append can wait on (Kafka's answer to
// their records, a catch-up for an unknown namespace behind slow end-of-topic queries), all with
// long deadlines: failing what waits on Kafka ends every stream, so shutdown never gives up on them
// (after 5 s it would leave the service behind, whose late completions would use the freed
// metadata store and writer) and returns soon after its grace.
TEST_F(MockFaults, ShutdownEndsStreamsWaitingOnKafkaWithinItsGrace) {
  ServerOptions options = MockServerOptions();
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  auto admin = Connect(server_->address(), seconds(3));
  ASSERT_TRUE(admin->CreateNamespace(1).ok());
  // End-of-topic queries (the catch-up for an unknown namespace) and produce requests (appends
  // to a known one) each take 10 s, longer than the test.
  rd_kafka_mock_cluster_t* cluster = this->cluster();
  constexpr size_t kSlowRequests = 50;
  for (size_t i = 0; i < kSlowRequests; ++i) {
    for (int16_t api : {kListOffsetsApiKey, kProduceApiKey}) {
      ASSERT_EQ(rd_kafka_mock_broker_push_request_error_rtts(cluster, 1, api, 1,
                                                             RD_KAFKA_RESP_ERR_NO_ERROR, 10000),
                RD_KAFKA_RESP_ERR_NO_ERROR);
    }
  }
  auto client = ClientWithoutRetries(seconds(30));
  ASSERT_NE(client, nullptr);
  std::mutex mu;
  std::condition_variable cv;
  int answered = 0;
  const auto count = [&](const absl::StatusOr<std::vector<uint64_t>>&) {
    std::lock_guard<std::mutex> lock(mu);
    ++answered;
    cv.notify_all();
  };
  v1::AppendRequest unknown;
  unknown.add_entries()->set_namespace_id(99);
  unknown.mutable_entries(0)->set_data("x");
  for (int i = 0; i < 10; ++i) client->AppendAsync(unknown, count);
  // Once a catch-up is under way, 10 more wait for the next one.
  size_t left = kSlowRequests;
  const auto asked_by = Clock::now() + seconds(5);
  while (left == kSlowRequests && Clock::now() < asked_by) {
    rd_kafka_mock_broker_error_stack_cnt(cluster, 1, kListOffsetsApiKey, &left);
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_LT(left, kSlowRequests) << "walserver never looked the unknown namespace up";
  for (int i = 0; i < 10; ++i) client->AppendAsync(unknown, count);
  v1::AppendRequest known;
  known.add_entries()->set_namespace_id(1);
  known.mutable_entries(0)->set_data("y");
  for (int i = 0; i < 10; ++i) client->AppendAsync(known, count);
  // Wait until walserver holds the appends to the known namespace.
  const Metrics& metrics = server_->metrics();
  const auto held_by = Clock::now() + seconds(5);
  while (metrics.appends_in_flight.load() < 10 && Clock::now() < held_by) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_GE(metrics.appends_in_flight.load(), 10) << "the appends never reached walserver";
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(answered, 0) << "appends were answered before shutdown: they waited on nothing";
  }
  const auto t0 = Clock::now();
  server_->Shutdown(seconds(1));
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  // About 1 s (the grace) and the teardown; giving up on the streams takes 5 s more.
  EXPECT_LT(took, 5.5) << "shutdown gave up waiting for the streams";
  std::unique_lock<std::mutex> lock(mu);
  EXPECT_TRUE(cv.wait_for(lock, seconds(10), [&] { return answered == 30; }))
      << answered << " of 30 appends answered";
}

TEST_F(MockFaults, ProduceErrorsFailTheAppend) {
  ServerOptions options = MockServerOptions();
  options.append_timeout = seconds(3);
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  auto client = Connect(server_->address(), seconds(10));
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  // Every produce request fails with a non-retriable error for a while.
  rd_kafka_mock_cluster_t* cluster = this->cluster();
  rd_kafka_mock_push_request_errors(
      cluster, kProduceApiKey, 10, RD_KAFKA_RESP_ERR_INVALID_RECORD,
      RD_KAFKA_RESP_ERR_INVALID_RECORD, RD_KAFKA_RESP_ERR_INVALID_RECORD,
      RD_KAFKA_RESP_ERR_INVALID_RECORD, RD_KAFKA_RESP_ERR_INVALID_RECORD,
      RD_KAFKA_RESP_ERR_INVALID_RECORD, RD_KAFKA_RESP_ERR_INVALID_RECORD,
      RD_KAFKA_RESP_ERR_INVALID_RECORD, RD_KAFKA_RESP_ERR_INVALID_RECORD,
      RD_KAFKA_RESP_ERR_INVALID_RECORD);
  auto failed = client->Append(1, {"x"});
  // Kafka refused the records: the append fails with Kafka's reason, and nothing is written.
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal) << failed.status();
  EXPECT_NE(failed.status().message().find("INVALID_RECORD"), absl::string_view::npos)
      << failed.status();
  rd_kafka_mock_clear_request_errors(cluster, kProduceApiKey);
  auto after = client->Append(1, {"y"});
  ASSERT_TRUE(after.ok()) << after.status();
  auto all = client->ReadAll(1);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u) << "the refused entry was written";
  EXPECT_EQ(all->front().data(), "y");
}

// A metadata change whose record failed after it was sent, with an error under which Kafka may
// have stored it, must not be answered "nothing changed" (UNAVAILABLE): the caller would take a
// namespace for absent that may exist, or an epoch for unissued that fences its writer.
TEST_F(MockFaults, AMetadataRecordKafkaMayHaveStoredIsAnsweredAsUnknown) {
  ServerOptions options = MockServerOptions();
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  auto client = Connect(server_->address(), seconds(5));
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  // librdkafka marks records failed with OUT_OF_ORDER_SEQUENCE_NUMBER "possibly persisted".
  rd_kafka_mock_cluster_t* cluster = this->cluster();
  rd_kafka_mock_push_request_errors(cluster, kProduceApiKey, 1,
                                    RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
  const absl::Status created = client->CreateNamespace(2).status();
  rd_kafka_mock_clear_request_errors(cluster, kProduceApiKey);
  EXPECT_EQ(created.code(), absl::StatusCode::kDeadlineExceeded) << created;
  EXPECT_NE(created.message().find("may still take effect"), absl::string_view::npos) << created;
  // The server goes on: later changes are written and answered as usual.
  absl::Status again;
  const auto deadline = Clock::now() + seconds(20);
  do {
    again = client->CreateNamespace(3).status();
  } while (!again.ok() && Clock::now() < deadline);
  EXPECT_TRUE(again.ok()) << again;
}

TEST_F(MockFaults, FatalProducerErrorReplacesTheProducer) {
  ServerOptions options = MockServerOptions();
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  // Before the client: its callback may still run while the client goes, should a check fail.
  std::promise<absl::Status> in_flight;
  auto client = Connect(server_->address(), seconds(5));
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  ASSERT_TRUE(client->Append(1, {"before"}).ok());

  // An append stuck in a producer's queue (the broker is down) when the fatal error comes.
  rd_kafka_mock_cluster_t* cluster = this->cluster();
  ASSERT_EQ(rd_kafka_mock_broker_set_down(cluster, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  v1::AppendRequest stuck;
  stuck.add_entries()->set_namespace_id(1);
  stuck.mutable_entries(0)->set_data("in flight");
  client->AppendAsync(
      stuck, [&](absl::StatusOr<std::vector<uint64_t>> r) { in_flight.set_value(r.status()); });
  const Metrics& metrics = server_->metrics();
  const auto held_by = Clock::now() + seconds(5);
  while (metrics.appends_in_flight.load() == 0 && Clock::now() < held_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(metrics.appends_in_flight.load(), 1) << "the append never reached walserver";

  const absl::Status injected = InjectFatalProducerErrors(server_->writer());
  ASSERT_TRUE(injected.ok()) << injected;
  // The next append replaces the producer, which fails what the old one still held; it is
  // written by the new producer once the broker is back.
  std::thread broker_back([cluster] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    rd_kafka_mock_broker_set_up(cluster, 1);
  });
  auto after = client->Append(1, {"after"});
  broker_back.join();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(server_->writer().replacements(), 1u);
  // The append that was in flight is answered, never left hanging: UNAVAILABLE if its records
  // were failed with the old producer, OK if Kafka had acknowledged them (on the mock cluster
  // it is the latter: the injected error does not stop records already sent).
  auto stuck_status = in_flight.get_future();
  ASSERT_EQ(stuck_status.wait_for(seconds(10)), std::future_status::ready);
  const absl::Status stuck_result = stuck_status.get();
  EXPECT_TRUE(stuck_result.ok() || absl::IsUnavailable(stuck_result)) << stuck_result;
  // Whatever it was answered, what was acknowledged is read back, each once. ("in flight" and
  // "after" were in flight together: either may come first.)
  auto all = client->ReadAll(1);
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<std::string> read;
  for (const auto& e : *all) read.push_back(e.data());
  ASSERT_FALSE(read.empty());
  EXPECT_EQ(read.front(), "before");
  std::sort(read.begin(), read.end());
  const std::vector<std::string> with = {"after", "before", "in flight"};
  const std::vector<std::string> without = {"after", "before"};
  if (stuck_result.ok()) {
    EXPECT_EQ(read, with) << "an acknowledged append must be read, once";
  } else {
    // An append answered UNAVAILABLE has an unknown outcome: it may be there, but once.
    EXPECT_TRUE(read == with || read == without) << absl::StrJoin(read, ", ");
  }
}

TEST_F(MockFaults, ConcurrentReadsAreCapped) {
  ServerOptions options = MockServerOptions();
  options.max_concurrent_reads = 2;
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  auto client = Connect(server_->address(), seconds(5));
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  ASSERT_TRUE(client->Append(1, {"x"}).ok());
  ReadOptions follow;
  follow.namespace_id = 1;
  follow.follow = true;
  std::vector<std::unique_ptr<ReadStream>> streams;
  v1::Entry entry;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(client->OpenRead(follow));
    ASSERT_TRUE(streams.back()->Next(&entry));  // running
  }
  auto third = client->ReadAll(1);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_NE(third.status().message().find("concurrent reads"), absl::string_view::npos);
  // Ending one frees its place.
  streams.front().reset();
  absl::StatusOr<std::vector<v1::Entry>> again;
  const auto deadline = Clock::now() + seconds(10);
  do {
    again = client->ReadAll(1);
  } while (!again.ok() && Clock::now() < deadline);
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(MockFaults, SlowKafkaTimesOutAppendsAndTheClientRetriesThrough) {
  ServerOptions options = MockServerOptions();
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  ClientOptions opts;
  opts.target = server_->address();
  opts.timeout = seconds(20);
  opts.append_attempt_timeout = seconds(2);
  opts.retry_backoff = milliseconds(50);
  auto client = Client::Connect(opts);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->CreateNamespace(1).ok());
  ASSERT_TRUE((*client)->Append(1, {"before"}).ok());
  // Every request to the broker now takes 3 s: longer than an attempt may wait.
  rd_kafka_mock_cluster_t* cluster = this->cluster();
  ASSERT_EQ(rd_kafka_mock_broker_set_rtt(cluster, 1, 3000), RD_KAFKA_RESP_ERR_NO_ERROR);
  std::thread heal([cluster] {
    std::this_thread::sleep_for(seconds(5));
    rd_kafka_mock_broker_set_rtt(cluster, 1, 0);
  });
  const auto t0 = Clock::now();
  auto ids = (*client)->Append(1, {"through the slowness"});
  const auto took = Clock::now() - t0;
  heal.join();
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_GT(took, seconds(2)) << "the first attempt must have timed out";
  // Retried attempts may all have been written: the read shows the entry once.
  auto all = (*client)->ReadAll(1);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ(all->back().data(), "through the slowness");
}

// The mock cluster has no DeleteRecords, like some managed Kafka services: pruning there is
// logical from the start (what --prune_mode=auto finds out on such a Kafka at its first round,
// shown on real Kafka by PruningTest.AutoModeTurnsLogicalWhenKafkaRefusesDeleteRecords).
TEST_F(MockFaults, PruningIsLogicalOnTheMockWhichHasNoDeleteRecords) {
  ServerOptions options = MockServerOptions();
  options.topic_count = 1;
  options.partitions_per_topic = 1;
  options.prune_interval = std::chrono::milliseconds(100);
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  auto client = Connect(server_->address());
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  auto ids = client->Append(1, {"a", "b", "c"});
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_TRUE(client->Truncate(1, (*ids)[1]).ok());
  const Metrics& metrics = server_->metrics();
  // Logical from the start: walserver builds no pruner on the mock, so it never asks to delete.
  EXPECT_EQ(metrics.prune_logical.load(), 1);
  auto read = client->ReadAll(1);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ(read->front().data(), "b");
}

// --prune_mode=logical is reported as such (it builds no pruner, so nothing is ever asked to
// delete); a mode that does not exist is refused at start.
TEST_F(MockFaults, PruneModeLogicalIsReportedAndBadModesAreRefused) {
  ServerOptions options = MockServerOptions();
  options.prune_interval = std::chrono::milliseconds(50);
  options.prune_mode = "logical";
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  EXPECT_EQ(server_->metrics().prune_logical.load(), 1);
  server_.reset();
  options.prune_mode = "sometimes";
  auto refused = WalServer::Start(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--prune_mode=sometimes"), absl::string_view::npos)
      << refused.status();
}

}  // namespace
}  // namespace wal::testing
