// AppendStream, on the wire and through walclient.
// Runs on the mock cluster and on real Kafka (contract_fixture.h).
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/common/crc32c.h"
#include "tests/contract/contract_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

using RawStream = grpc::ClientReaderWriter<v1::AppendStreamRequest, v1::AppendStreamResponse>;

v1::StreamedAppend* AddAppend(v1::AppendStreamRequest* message, uint64_t request_id,
                              std::vector<std::pair<uint64_t, std::string>> entries,
                              uint64_t epoch = 0) {
  v1::StreamedAppend* append = message->add_appends();
  append->set_request_id(request_id);
  for (auto& [ns, data] : entries) {
    v1::Entry* e = append->mutable_append()->add_entries();
    e->set_namespace_id(ns);
    e->set_data(std::move(data));
    e->set_epoch(epoch);
  }
  return append;
}

// Reads answers until every id in `want` is answered; by request id.
std::map<uint64_t, v1::AppendResult> Answers(RawStream* stream, size_t want) {
  std::map<uint64_t, v1::AppendResult> answers;
  v1::AppendStreamResponse response;
  while (answers.size() < want && stream->Read(&response)) {
    for (const auto& result : response.results()) {
      EXPECT_TRUE(answers.emplace(result.request_id(), result).second)
          << "request " << result.request_id() << " answered twice";
    }
  }
  return answers;
}

// One message carrying good and bad appends: each is answered on its own, the bad ones write
// nothing, and a fenced namespace fails only its own append.
TEST_F(ContractTest, AppendStreamAnswersEachAppendOnItsOwn) {
  Create(1);
  Create(2);
  auto owner = Connect(server_->address());
  ASSERT_TRUE(owner->AcquireNamespace(2).ok());  // epoch 1: this stream's epoch 0 is fenced
  const uint64_t end2 = client_->GetNamespace(2)->next_entry_id();

  grpc::ClientContext ctx;
  std::unique_ptr<RawStream> stream = client_->stub().AppendStream(&ctx);
  v1::AppendStreamRequest message;
  AddAppend(&message, 10, {{1, "first"}});
  AddAppend(&message, 11, {{2, "fenced"}});
  AddAppend(&message, 12, {});
  AddAppend(&message, 13, {{424242, "unknown namespace"}});
  AddAppend(&message, 14, {{1, std::string((1 << 20) + 1, 'x')}});  // over max_entry_bytes
  AddAppend(&message, 15, {{0, "namespace zero"}});
  AddAppend(&message, 16, {{1, "second"}, {1, "third"}});
  // Data that does not match the checksum sent with it (corrupted on the way).
  AddAppend(&message, 18, {{1, "flipped"}})
      ->mutable_append()
      ->mutable_entries(0)
      ->set_crc32c(Crc32c("flipped") ^ 1);
  ASSERT_TRUE(stream->Write(message));
  // A second message on the same stream: the stream goes on after failures.
  v1::AppendStreamRequest more;
  AddAppend(&more, 17, {{1, "fourth"}});
  ASSERT_TRUE(stream->Write(more));
  std::map<uint64_t, v1::AppendResult> answers = Answers(stream.get(), 9);
  ASSERT_EQ(answers.size(), 9u);
  EXPECT_EQ(answers[10].code(), 0) << answers[10].message();
  EXPECT_EQ(answers[10].entry_ids_size(), 1);
  EXPECT_EQ(answers[11].code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(answers[11].message().find("fenced"), std::string::npos) << answers[11].message();
  EXPECT_EQ(answers[12].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(answers[13].code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(answers[14].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(answers[14].message().find("max_entry_bytes"), std::string::npos);
  EXPECT_EQ(answers[15].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(answers[16].code(), 0) << answers[16].message();
  ASSERT_EQ(answers[16].entry_ids_size(), 2);
  EXPECT_LT(answers[16].entry_ids(0), answers[16].entry_ids(1));
  EXPECT_EQ(answers[17].code(), 0) << answers[17].message();
  EXPECT_EQ(answers[18].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(answers[18].message().find("crc32c"), std::string::npos) << answers[18].message();
  for (const auto& [id, answer] : answers) {
    if (answer.code() != 0) {
      EXPECT_EQ(answer.entry_ids_size(), 0) << "request " << id;
    }
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());

  std::vector<std::string> read = ReadData(1);
  std::multiset<std::string> got(read.begin(), read.end());
  EXPECT_EQ(got, (std::multiset<std::string>{"first", "second", "third", "fourth"}));
  EXPECT_EQ(client_->GetNamespace(2)->next_entry_id(), end2) << "the fenced append wrote";
}

// Many threads appending single entries through one client share its stream: every append
// is acknowledged, and each thread's entries are read back in its order, once.
TEST_F(ContractTest, ThreadsShareTheAppendStreamAndKeepTheirOrder) {
  constexpr int kThreads = 16;
  constexpr int kPerThread = 50;
  for (int t = 0; t < kThreads; ++t) Create(100 + t % 4);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto ids = client_->Append(100 + t % 4, {absl::StrCat("t", t, " ", i)});
        if (!ids.ok() || ids->size() != 1) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  std::map<int, int> next;  // per thread, the next entry expected
  size_t total = 0;
  for (uint64_t ns = 100; ns < 104; ++ns) {
    for (const std::string& data : ReadData(ns)) {
      int t = 0, i = 0;
      ASSERT_EQ(sscanf(data.c_str(), "t%d %d", &t, &i), 2) << data;
      EXPECT_EQ(t % 4, static_cast<int>(ns - 100));
      EXPECT_EQ(i, next[t]++) << "thread " << t << " out of order or twice";
      ++total;
    }
  }
  EXPECT_EQ(total, static_cast<size_t>(kThreads * kPerThread));
  // They went on the stream, not as unary calls.
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(
      metrics.find(absl::StrCat("walserver_rpc_calls_total{method=\"StreamedAppend\",code=\"OK\"} ",
                                kThreads * kPerThread, "\n")),
      std::string::npos)
      << metrics;
}

// A client that cancels its stream with appends in flight leaves the server serving (and,
// under the sanitizers, leaks nothing); a stream that is never closed does not hold shutdown.
TEST_F(ContractTest, CancelledAndOpenAppendStreamsEndCleanly) {
  Create(1);
  for (int round = 0; round < 5; ++round) {
    grpc::ClientContext ctx;
    std::unique_ptr<RawStream> stream = client_->stub().AppendStream(&ctx);
    v1::AppendStreamRequest message;
    for (int i = 0; i < 20; ++i) AddAppend(&message, i, {{1, absl::StrCat("r", round, " ", i)}});
    ASSERT_TRUE(stream->Write(message));
    ctx.TryCancel();
    stream->Finish();
  }
  ASSERT_FALSE(Append(1, {"after the cancelled streams"}).empty());

  // Open with one append answered, never closed: shutdown ends it UNAVAILABLE, well within the
  // 5 s grace that it would otherwise use up.
  grpc::ClientContext ctx;
  std::unique_ptr<RawStream> open = client_->stub().AppendStream(&ctx);
  v1::AppendStreamRequest message;
  AddAppend(&message, 1, {{1, "before shutdown"}});
  ASSERT_TRUE(open->Write(message));
  ASSERT_EQ(Answers(open.get(), 1).at(1).code(), 0);
  const auto start = std::chrono::steady_clock::now();
  std::thread shutdown([&] { server_->Shutdown(seconds(5)); });
  v1::AppendStreamResponse response;
  while (open->Read(&response)) {
  }
  const grpc::Status ended = open->Finish();
  shutdown.join();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(4));
}

// A stream cancelled with appends still waiting for Kafka, then shutdown at once: the appends'
// completions arrive after their call ended, and must find the service still there (the
// sanitizer builds catch a use after free) and complete within the grace, not leave the service
// behind after waiting 5 s for them.
TEST_F(ContractTest, ShutdownRightAfterACancelledStreamWithAppendsInFlight) {
  Create(1);
  const Metrics& metrics = server_->metrics();
  if (!OnRealKafka()) {
    // Every Kafka request takes 1 s, so that the appends are still in flight at the cancel.
    ASSERT_EQ(rd_kafka_mock_broker_set_rtt(server_->mock_cluster()->cluster(), 1, 1000),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  grpc::ClientContext ctx;
  std::unique_ptr<RawStream> stream = client_->stub().AppendStream(&ctx);
  v1::AppendStreamRequest message;
  for (int i = 0; i < 200; ++i) AddAppend(&message, i, {{1, std::string(4000, 'c')}});
  ASSERT_TRUE(stream->Write(message));
  if (!OnRealKafka()) {
    const auto started_by = Clock::now() + seconds(5);
    while (metrics.appends_in_flight.load() == 0 && Clock::now() < started_by) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    ASSERT_GT(metrics.appends_in_flight.load(), 0) << "walserver never started the appends";
  }
  ctx.TryCancel();
  stream->Finish();
  const auto t0 = Clock::now();
  server_->Shutdown(seconds(5));
  EXPECT_LT(Clock::now() - t0, milliseconds(4500)) << "shutdown gave up waiting for the stream";
  EXPECT_EQ(metrics.appends_in_flight.load(), 0) << "an append never completed";
}

// With nothing listening, a streamed append ends by its deadline with a retryable code, and
// its callback runs once.
TEST_F(ContractTest, StreamedAppendsEndByTheirDeadlineWithoutAServer) {
  ClientOptions options;
  options.target = "127.0.0.1:1";  // nothing listens there
  options.timeout = milliseconds(1500);
  options.retry_backoff = milliseconds(50);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  const auto start = std::chrono::steady_clock::now();
  auto ids = (*client)->Append(1, {"nowhere"});
  EXPECT_TRUE(absl::IsUnavailable(ids.status()) || absl::IsDeadlineExceeded(ids.status()))
      << ids.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2500));
  std::atomic<int> calls{0};
  std::promise<absl::Status> done;
  v1::AppendRequest request;
  request.add_entries()->set_namespace_id(1);
  (*client)->AppendAsync(std::move(request), [&](absl::StatusOr<std::vector<uint64_t>> r) {
    if (calls++ == 0) done.set_value(r.status());
  });
  const absl::Status async = done.get_future().get();
  EXPECT_TRUE(absl::IsUnavailable(async) || absl::IsDeadlineExceeded(async)) << async;
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  client->reset();  // returns: nothing is left in flight
  EXPECT_EQ(calls, 1);
}

// A client destroyed while its AppendAsync calls are in flight waits for them: each callback
// runs once, and the destructor returns.
TEST_F(ContractTest, AClientDestroyedWithAppendsInFlightFinishesThem) {
  Create(1);
  std::atomic<int> ok{0}, failed{0};
  {
    auto client = Connect(server_->address());
    for (int i = 0; i < 100; ++i) {
      v1::AppendRequest request;
      auto* e = request.add_entries();
      e->set_namespace_id(1);
      e->set_data(absl::StrCat("async ", i));
      client->AppendAsync(std::move(request), [&](absl::StatusOr<std::vector<uint64_t>> r) {
        ++(r.ok() ? ok : failed);
      });
    }
  }
  EXPECT_EQ(ok + failed, 100);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(ReadData(1).size(), 100u);
}

// A burst of small appends larger than one message may carry (4096 appends): the client splits
// it, and every append succeeds once.
TEST_F(ContractTest, ABurstOfAsyncAppendsLargerThanAMessageAllSucceed) {
  Create(1);
  constexpr int kAppends = 10000;
  std::atomic<int> ok{0}, failed{0};
  std::mutex mu;
  absl::Status first_error;
  for (int i = 0; i < kAppends; ++i) {
    v1::AppendRequest request;
    auto* e = request.add_entries();
    e->set_namespace_id(1);
    e->set_data(absl::StrCat(i));
    client_->AppendAsync(std::move(request), [&](absl::StatusOr<std::vector<uint64_t>> r) {
      if (r.ok()) {
        ++ok;
        return;
      }
      std::lock_guard<std::mutex> lock(mu);
      if (failed++ == 0) first_error = r.status();
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (ok + failed < kAppends && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(ok, kAppends) << first_error;
  std::vector<std::string> read = ReadData(1);
  EXPECT_EQ(std::set<std::string>(read.begin(), read.end()).size(), size_t{kAppends});
  EXPECT_EQ(read.size(), size_t{kAppends});
}

// An append too large for one message goes alone as a unary call: it fails with the server's
// limit, and the appends streamed beside it are not touched.
TEST_F(ContractTest, AnOversizedAppendFailsAloneBesideStreamedOnes) {
  Create(1);
  ClientOptions options;
  options.target = server_->address();
  options.max_retries = 0;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  std::atomic<int> small_ok{0};
  std::vector<std::thread> smalls;
  for (int t = 0; t < 4; ++t) {
    smalls.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        if ((*client)->Append(1, {absl::StrCat("small ", t, " ", i)}).ok()) ++small_ok;
      }
    });
  }
  auto big = (*client)->Append(1, {std::string(server_->max_entry_bytes() + (5 << 20), 'x')});
  for (auto& t : smalls) t.join();
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  EXPECT_EQ(small_ok, 80);
}

// The stream and the unary call answer bad input alike: an entry over the limit is refused on
// its own, and appends with the unary call (append_stream off) still work.
TEST_F(ContractTest, UnaryAndStreamedAppendsAgree) {
  Create(1);
  ClientOptions options;
  options.target = server_->address();
  options.append_stream = false;
  auto unary = Client::Connect(options);
  ASSERT_TRUE(unary.ok());
  auto big = std::string((1 << 20) + 1, 'x');
  auto by_stream = client_->Append(1, {big});
  auto by_call = (*unary)->Append(1, {big});
  EXPECT_EQ(by_stream.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(by_stream.status(), by_call.status());
  ASSERT_TRUE((*unary)->Append(1, {"unary"}).ok());
  ASSERT_TRUE(client_->Append(1, {"streamed"}).ok());
  EXPECT_EQ(ReadData(1), (std::vector<std::string>{"unary", "streamed"}));
}

}  // namespace
}  // namespace wal::testing
