// Append: batches, limits, split entries, checksums, codecs, and retries that write once.
// Runs on the mock cluster and on real Kafka (contract_fixture.h).
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/retry.h"
#include "server/common/crc32c.h"
#include "tests/contract/contract_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(ContractTest, RoundTripOfMixedBatches) { RoundTrip(*client_, 100, 10, 1000, 1); }

TEST_F(ContractTest, EmptyAppendIsInvalid) {
  EXPECT_EQ(client_->Append(v1::AppendRequest()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ContractTest, EntryOverTheLimitIsRejectedAndNothingWritten) {
  Create(3);
  const uint64_t before = client_->GetNamespace(3)->next_entry_id();
  auto status =
      client_->Append(3, {"small", std::string(server_->max_entry_bytes() + 1, 'x')}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("max_entry_bytes"), absl::string_view::npos) << status;
  EXPECT_EQ(client_->GetNamespace(3)->next_entry_id(), before);
  EXPECT_TRUE(ReadData(3).empty());
  // Exactly at the limit is fine.
  const std::string at_limit(server_->max_entry_bytes(), 'y');
  Append(3, {at_limit});
  EXPECT_EQ(ReadData(3), std::vector<std::string>{at_limit});
}

TEST_F(ContractTest, SplitEntriesRoundTrip) {
  Create(4);
  std::mt19937_64 rng(4);
  // Several records each (64 KiB records), interleaved with small entries of another namespace.
  Create(5);
  std::vector<std::string> big = {RandomData(rng, 200000), RandomData(rng, 65536),
                                  RandomData(rng, 1 << 20)};
  for (const std::string& b : big) {
    Append(4, {b});
    Append(5, {"between"});
  }
  EXPECT_EQ(ReadData(4), big);
  EXPECT_EQ(ReadData(5).size(), 3u);
}

// End-to-end checksums: each entry's CRC-32C travels with it from the appender to the reader.
TEST_F(ContractTest, ChecksumsTravelWithEveryEntry) {
  Create(1);
  // walclient sends one with each entry; a caller that leaves it out (grpcurl) gets one that
  // walserver computes. Both come back with the entry, split entries too.
  const std::string split(200 * 1024, 's');  // over max_record_bytes: three records
  ASSERT_EQ(Append(1, {"from walclient", split}).size(), 2u);
  {
    grpc::ClientContext ctx;
    v1::AppendRequest request;
    v1::Entry* e = request.add_entries();
    e->set_namespace_id(1);
    e->set_data("without a checksum");
    v1::AppendResponse response;
    ASSERT_TRUE(client_->stub().Append(&ctx, request, &response).ok());
  }
  auto entries = client_->ReadAll(1);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  for (const v1::Entry& e : *entries) {
    ASSERT_TRUE(e.has_crc32c()) << e.data().substr(0, 20);
    EXPECT_EQ(e.crc32c(), Crc32c(e.data())) << e.data().substr(0, 20);
  }
  EXPECT_EQ((*entries)[2].data(), "without a checksum");
}

TEST_F(ContractTest, AnEntryCorruptedOnTheWayIsRefusedAndNothingIsWritten) {
  Create(1);
  Append(1, {"before"});
  const uint64_t end = client_->GetNamespace(1)->next_entry_id();
  grpc::ClientContext ctx;
  v1::AppendRequest request;
  for (const char* data : {"fine", "flipped"}) {
    v1::Entry* e = request.add_entries();
    e->set_namespace_id(1);
    e->set_data(data);
    e->set_crc32c(Crc32c(data));
  }
  request.mutable_entries(1)->mutable_data()->at(0) ^= 0x20;  // a bit flipped after the checksum
  v1::AppendResponse response;
  const grpc::Status status = client_->stub().Append(&ctx, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("entries[1]: crc32c"), std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find("nothing was written"), std::string::npos);
  EXPECT_EQ(client_->GetNamespace(1)->next_entry_id(), end) << "a refused append wrote";
  EXPECT_EQ(ReadData(1), (std::vector<std::string>{"before"}));
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(metrics.find("walserver_append_checksum_mismatches_total 1"), std::string::npos)
      << metrics;
}

// Every codec of --compression round-trips entries, split ones included.
TEST_F(ContractTest, EveryCompressionCodecRoundTrips) {
  for (const std::string codec : {"none", "lz4", "zstd", "snappy", "gzip"}) {
    ServerOptions options = MockServerOptions();
    if (OnRealKafka()) {
      options.brokers = TestBrokers();
      options.replication_factor = 1;
      options.min_insync_replicas = 1;
    }
    options.topic_prefix = UniqueName("codec_" + codec);
    options.max_record_bytes = 64 * 1024;
    options.compression = codec;
    auto server = WalServer::Start(options);
    ASSERT_TRUE(server.ok()) << codec << ": " << server.status();
    auto client = Connect((*server)->address());
    ASSERT_TRUE(client->CreateNamespace(1).ok());
    const std::string rows = absl::StrCat(std::string(200 * 1024, 'r'), codec);
    ASSERT_TRUE(client->Append(1, {"small " + codec, rows}).ok()) << codec;
    auto read = client->ReadAll(1);
    ASSERT_TRUE(read.ok()) << codec << ": " << read.status();
    ASSERT_EQ(read->size(), 2u) << codec;
    EXPECT_EQ((*read)[0].data(), "small " + codec);
    EXPECT_EQ((*read)[1].data(), rows) << codec;
  }
}

TEST_F(ContractTest, RetriedAppendsAreReadOnce) {
  Create(3);
  // The same request sent three times, as a client does after lost answers; then a request
  // that overlaps it.
  v1::AppendRequest request;
  request.set_writer_id(55);
  for (uint64_t seq : {1, 2}) {
    auto* e = request.add_entries();
    e->set_namespace_id(3);
    e->set_sequence(seq);
    e->set_data(absl::StrCat("seq ", seq));
  }
  std::vector<uint64_t> first_ids;
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    v1::AppendResponse response;
    ASSERT_TRUE(client_->stub().Append(&ctx, request, &response).ok());
    if (i == 0) first_ids.assign(response.entry_ids().begin(), response.entry_ids().end());
  }
  request.mutable_entries(0)->set_sequence(3);
  request.mutable_entries(0)->set_data("seq 3");
  {
    grpc::ClientContext ctx;
    v1::AppendResponse response;
    ASSERT_TRUE(client_->stub().Append(&ctx, request, &response).ok());
  }
  auto entries = client_->ReadAll(3);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].data(), "seq 1");
  EXPECT_EQ((*entries)[0].entry_id(), first_ids[0]);
  EXPECT_EQ((*entries)[1].data(), "seq 2");
  EXPECT_EQ((*entries)[1].entry_id(), first_ids[1]);
  EXPECT_EQ((*entries)[2].data(), "seq 3");
  EXPECT_EQ((*entries)[2].sequence(), 3u);
}

TEST_F(ContractTest, ARetryOfWrittenEntriesGetsTheirIdsAndWritesNothing) {
  Create(3);
  const auto first = RawAppend(*client_, Sequenced(3, 56, {1, 2}));
  ASSERT_TRUE(first.ok()) << first.status();
  const uint64_t end = NextEntryId(*client_, 3);
  // The answer was lost: the appender sends the same entries again, saying it is a retry.
  v1::AppendRequest retry = Sequenced(3, 56, {1, 2});
  retry.set_first_attempt_age_ms(1000);
  const auto again = RawAppend(*client_, retry);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first) << "a retry is answered with the ids of the copies in the log";
  EXPECT_EQ(NextEntryId(*client_, 3), end) << "and writes nothing";
  // A retry of a written entry and a new one: the new one is written, in its place.
  retry = Sequenced(3, 56, {2, 3});
  retry.set_first_attempt_age_ms(1);
  const auto mixed = RawAppend(*client_, retry);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  ASSERT_EQ(mixed->size(), 2u);
  EXPECT_EQ((*mixed)[0], (*first)[1]);
  EXPECT_GE((*mixed)[1], end);
  auto entries = client_->ReadAll(3);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[2].entry_id(), (*mixed)[1]);
  EXPECT_NE(server_->metrics().Render().find("walserver_append_retried_entries_found_total 3\n"),
            std::string::npos);
  // One entry twice in an append, first attempt or retry: refused, nothing written.
  for (uint64_t age : {0, 1000}) {
    v1::AppendRequest twice = Sequenced(3, 56, {9, 9});
    twice.set_first_attempt_age_ms(age);
    grpc::ClientContext ctx;
    v1::AppendResponse response;
    EXPECT_EQ(client_->stub().Append(&ctx, twice, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << "age " << age;
  }
  EXPECT_EQ(NextEntryId(*client_, 3), (*mixed)[1] + 1);
}

// A copy in an earlier incarnation of the namespace (deleted and created again since) is not the
// entry's: reads of the namespace never give it, so the retry writes the entry again.
TEST_F(ContractTest, ARetryAfterItsNamespaceWasCreatedAgainIsWrittenInTheNewOne) {
  Create(9);
  const auto first = RawAppend(*client_, Sequenced(9, 62, {1}));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(client_->DeleteNamespace(9).ok());
  const uint64_t start = Create(9);
  v1::AppendRequest retry = Sequenced(9, 62, {1});
  retry.set_first_attempt_age_ms(1000);
  const auto again = RawAppend(*client_, retry);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GE((*again)[0], start) << "answered with the id of the deleted incarnation's copy";
  auto entries = client_->ReadAll(9);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].entry_id(), (*again)[0]);
}

// Random appends of one writer to two namespaces: answers lost (ignored, or a 1 ms deadline that
// may end the attempt before or after the entry is written), retries of lost and of answered
// appends, several retries of one entry at once, truncations, and acquisitions that raise the
// epoch (retries of older epochs are then refused). Every answer for an entry names one id, the
// one reads give, and each entry is in the log at most once.
TEST_F(ContractTest, RandomRetriesTruncationsAndFencesLeaveEachEntryOnce) {
  constexpr uint64_t kWriter = 61;
  const std::vector<uint64_t> namespaces = {6, 7};
  for (uint64_t ns : namespaces) Create(ns);
  std::mt19937 rng(61);
  struct Sent {
    v1::AppendRequest request;
    std::chrono::steady_clock::time_point first_attempt;
  };
  std::map<std::pair<uint64_t, uint64_t>, Sent> sent;  // (ns, seq): its append
  std::mutex answers_mu;  // retries sent at once answer on their own threads
  std::map<std::pair<uint64_t, uint64_t>, std::set<uint64_t>> answers;  // (ns, seq): ids given
  std::map<uint64_t, uint64_t> next_sequence;
  std::map<uint64_t, uint64_t> epoch;
  const auto send = [&](const v1::AppendRequest& request, std::chrono::milliseconds timeout,
                        bool keep_answer) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::AppendResponse response;
    const grpc::Status status = client_->stub().Append(&ctx, request, &response);
    if (!status.ok() || !keep_answer) return status.error_code();
    std::lock_guard<std::mutex> lock(answers_mu);
    for (int i = 0; i < request.entries_size(); ++i) {
      const v1::Entry& e = request.entries(i);
      answers[{e.namespace_id(), e.sequence()}].insert(response.entry_ids(i));
    }
    return status.error_code();
  };
  const auto retry = [&](const Sent& s) {
    v1::AppendRequest again = s.request;
    MarkRetry(&again, s.first_attempt);
    return send(again, seconds(30), true);
  };
  int refused_as_fenced = 0;
  for (int op = 0; op < 200; ++op) {
    const uint64_t ns = namespaces[rng() % namespaces.size()];
    const int kind = static_cast<int>(rng() % 100);
    if (kind < 50 || sent.empty()) {  // a new append of 1-3 entries, its answer perhaps lost
      Sent s;
      s.request.set_writer_id(kWriter);
      for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) {
        v1::Entry* e = s.request.add_entries();
        e->set_namespace_id(ns);
        e->set_sequence(++next_sequence[ns]);
        e->set_epoch(epoch[ns]);
        e->set_data(absl::StrCat("ns ", ns, " seq ", e->sequence()));
      }
      s.first_attempt = std::chrono::steady_clock::now();
      const bool lost = rng() % 3 == 0;
      send(s.request, lost && rng() % 2 == 0 ? milliseconds(1) : seconds(30), !lost);
      for (const v1::Entry& e : s.request.entries()) sent[{ns, e.sequence()}] = s;
    } else if (kind < 88) {  // a retry of any append sent, sometimes three at once
      auto it = std::next(sent.begin(), static_cast<long>(rng() % sent.size()));
      std::vector<grpc::StatusCode> codes(rng() % 4 == 0 ? 3 : 1);
      std::vector<std::thread> at_once;
      for (auto& code : codes) at_once.emplace_back([&, s = it->second] { code = retry(s); });
      for (auto& t : at_once) t.join();
      for (grpc::StatusCode code : codes) {
        if (code == grpc::StatusCode::FAILED_PRECONDITION) {
          ++refused_as_fenced;  // written under an epoch acquired away since
        } else {
          EXPECT_EQ(code, grpc::StatusCode::OK);
        }
      }
    } else if (kind < 98) {  // truncate at an entry answered
      auto info = client_->GetNamespace(ns);
      ASSERT_TRUE(info.ok()) << info.status();
      if (info->next_entry_id() > info->first_entry_id()) {
        const uint64_t span = info->next_entry_id() - info->first_entry_id();
        ASSERT_TRUE(client_->Truncate(ns, info->first_entry_id() + rng() % span).ok());
      }
    } else {  // acquire: a new epoch fences the appends of older ones
      auto acquired = client_->AcquireNamespace(ns);
      ASSERT_TRUE(acquired.ok()) << acquired.status();
      epoch[ns] = acquired->epoch;
    }
  }
  // Every entry sent is retried until answered (or refused as fenced).
  for (const auto& [key, s] : sent) {
    if (answers.count(key) == 0 && retry(s) == grpc::StatusCode::FAILED_PRECONDITION) {
      ++refused_as_fenced;
    }
  }
  std::map<EntryName, int> all;
  for (int t = 0; t < server_options_.topic_count; ++t) {
    for (int p = 0; p < server_options_.partitions_per_topic; ++p) {
      auto slot = EntryCopies(Bootstrap(), absl::StrCat(server_options_.topic_prefix, "_", t), p);
      ASSERT_TRUE(slot.ok()) << slot.status();
      for (const auto& [name, n] : *slot) all[name] += n;
    }
  }
  for (const auto& [key, ids] : answers) {
    EXPECT_EQ(ids.size(), 1u) << "namespace " << key.first << " sequence " << key.second;
    EXPECT_EQ((all[{key.first, kWriter, key.second}]), 1)
        << "namespace " << key.first << " sequence " << key.second;
  }
  for (const auto& [name, n] : all) {
    EXPECT_LE(n, 1) << "namespace " << std::get<0>(name) << " sequence " << std::get<2>(name);
  }
  // Reads from the truncation point on give the ids the answers gave.
  for (uint64_t ns : namespaces) {
    auto entries = client_->ReadAll(ns);
    ASSERT_TRUE(entries.ok()) << entries.status();
    for (const v1::Entry& e : *entries) {
      const auto it = answers.find({ns, e.sequence()});
      if (it == answers.end()) continue;  // written under a fenced epoch, its retry refused
      EXPECT_EQ(*it->second.begin(), e.entry_id()) << "namespace " << ns;
    }
  }
  EXPECT_GT(answers.size(), 120u);
  std::cerr << "RESULT " << sent.size() << " entries, " << answers.size() << " answered, "
            << refused_as_fenced << " retries refused as fenced\n";
}

// Unary appends lose every third answer; on the append stream every third message of answers is
// lost with its stream.
void RetriesAfterLostAnswersLeaveNoDuplicates(ContractTest* test, bool stream);

TEST_F(ContractTest, ClientRetriesAfterLostAnswersWithoutDuplicates) {
  RetriesAfterLostAnswersLeaveNoDuplicates(this, /*stream=*/false);
}

TEST_F(ContractTest, ClientRetriesAfterLostStreamsWithoutDuplicates) {
  RetriesAfterLostAnswersLeaveNoDuplicates(this, /*stream=*/true);
}

void RetriesAfterLostAnswersLeaveNoDuplicates(ContractTest* test, bool stream) {
  test->Create(4);
  test->Create(5);
  LostAnswers lost;
  ClientOptions options;
  options.append_stream = stream;
  auto losing = LosingClient(test->server_->address(), 3, &lost, options);
  std::vector<std::string> expected4, expected5;
  std::vector<uint64_t> answered4;  // the ids the client returned for namespace 4
  for (int i = 0; i < 30; ++i) {
    v1::AppendRequest request;
    for (uint64_t ns : {4, 5}) {
      auto* e = request.add_entries();
      e->set_namespace_id(ns);
      e->set_data(absl::StrCat("ns ", ns, " entry ", i));
      (ns == 4 ? expected4 : expected5).push_back(e->data());
    }
    auto ids = losing->Append(request);
    ASSERT_TRUE(ids.ok()) << ids.status();
    answered4.push_back((*ids)[0]);
  }
  // AppendAsync retries the same way.
  std::atomic<int> pending{10};
  std::atomic<int> failed{0};
  for (int i = 0; i < 10; ++i) {
    v1::AppendRequest request;
    auto* e = request.add_entries();
    e->set_namespace_id(4);
    e->set_data(absl::StrCat("async ", i));
    losing->AppendAsync(std::move(request), [&](absl::StatusOr<std::vector<uint64_t>> ids) {
      if (!ids.ok()) ++failed;
      --pending;
    });
  }
  while (pending > 0) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(failed, 0);
  EXPECT_GE(lost.count, 10) << "the test must really have lost answers";

  auto read4 = test->ReadData(4);
  ASSERT_EQ(read4.size(), 40u);
  auto entries4 = test->client_->ReadAll(4);
  ASSERT_TRUE(entries4.ok()) << entries4.status();
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ((*entries4)[i].entry_id(), answered4[i]) << "the answer names the copy reads give";
  }
  EXPECT_EQ(std::vector<std::string>(read4.begin(), read4.begin() + 30), expected4);
  std::set<std::string> async(read4.begin() + 30, read4.end());
  EXPECT_EQ(async.size(), 10u) << "each async entry exactly once";
  EXPECT_EQ(test->ReadData(5), expected5);
  // The retries found their first copies: none was written twice, so reads dropped none.
  const std::string metrics = test->server_->metrics().Render();
  EXPECT_NE(metrics.find("walserver_read_duplicate_entries_total 0\n"), std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("walserver_append_retried_entries_found_total 0\n"), std::string::npos);
}

}  // namespace
}  // namespace wal::testing
