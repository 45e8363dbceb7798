// ReadMany: each namespace replayed in order with an end of its own, following, and bad input.
// Runs on the mock cluster and on real Kafka (contract_fixture.h).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/contract/contract_fixture.h"
#include "tests/support/test_util.h"
#include "wal/v1/wal.grpc.pb.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct ReadManyResult {
  std::map<uint64_t, std::vector<std::string>> data;
  std::map<uint64_t, v1::ReadEnd> ends;
  absl::Status status;
};

ReadManyResult ReadMany(Client& client, const ReadManyOptions& options) {
  ReadManyResult result;
  result.status = client.ReadMany(
      options,
      [&](v1::Entry& e) {
        EXPECT_EQ(result.ends.count(e.namespace_id()), 0u) << "an entry after its namespace ended";
        result.data[e.namespace_id()].push_back(e.data());
        return true;
      },
      [&](const v1::ReadEnd& end) {
        EXPECT_TRUE(result.ends.emplace(end.namespace_id(), end).second) << "ended twice";
        return true;
      });
  return result;
}

TEST_F(ContractTest, ReadManyReplaysEachNamespaceInOrderWithAnEndEach) {
  // Several namespaces sharing slots, appended interleaved.
  std::map<uint64_t, std::vector<std::string>> want;
  for (uint64_t ns = 1; ns <= 12; ++ns) Create(ns);
  for (int i = 0; i < 30; ++i) {
    v1::AppendRequest request;
    for (uint64_t ns = 1; ns <= 12; ++ns) {
      auto* e = request.add_entries();
      e->set_namespace_id(ns);
      e->set_data(
          absl::StrCat("ns ", ns, " entry ", i,
                       ns == 3 && i % 7 == 0 ? std::string(150 * 1024, 's') : std::string()));
      want[ns].push_back(e->data());
    }
    ASSERT_TRUE(client_->Append(std::move(request)).ok());
  }
  ReadManyOptions options;
  for (uint64_t ns = 1; ns <= 12; ++ns) options.namespaces.push_back({ns, 0, 0});
  options.namespaces.push_back({777, 0, 0});  // unknown: ends NOT_FOUND, the others go on
  ReadManyResult got = ReadMany(*client_, options);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.data, want);
  ASSERT_EQ(got.ends.size(), 13u);
  for (uint64_t ns = 1; ns <= 12; ++ns) {
    EXPECT_EQ(got.ends[ns].code(), 0) << ns << ": " << got.ends[ns].message();
    EXPECT_FALSE(got.ends[ns].caught_up());
  }
  EXPECT_EQ(got.ends[777].code(), grpc::StatusCode::NOT_FOUND);

  // Start ids and limits are per namespace; a start past the end fails only its namespace.
  const uint64_t second_of_5 = client_->ReadAll(5, 0, 2)->at(1).entry_id();
  options.namespaces = {{5, second_of_5, 3}, {6, 0, 1}, {7, UINT64_MAX, 0}};
  got = ReadMany(*client_, options);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.data[5], std::vector<std::string>(want[5].begin() + 1, want[5].begin() + 4));
  EXPECT_EQ(got.data[6], std::vector<std::string>{want[6][0]});
  EXPECT_EQ(got.ends[7].code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(got.ends[5].code(), 0);
}

TEST_F(ContractTest, ReadManyEndsTheNamespacesWithNothingToReadInOneMessage) {
  // A datanode opening its regions: one with entries, many empty, some unknown. Sent one by
  // one, the ends of those with nothing to read held up the one that has entries.
  Create(1);
  const std::vector<std::string> entries = {"a", "b", "c"};
  ASSERT_EQ(Append(1, entries).size(), 3u);
  v1::ReadManyRequest request;
  request.add_reads()->set_namespace_id(1);
  for (uint64_t ns = 100; ns < 105; ++ns) {
    Create(ns);
    request.add_reads()->set_namespace_id(ns);
  }
  for (uint64_t ns = 900; ns < 950; ++ns) request.add_reads()->set_namespace_id(ns);
  auto stub = v1::WalService::NewStub(
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
  auto reader = stub->ReadMany(&ctx, request);
  std::vector<std::string> got;
  std::map<uint64_t, int32_t> codes;
  int messages_with_ends = 0;
  v1::ReadResponse response;
  while (reader->Read(&response)) {
    for (const v1::Entry& e : response.entries()) {
      EXPECT_EQ(codes.count(e.namespace_id()), 0u) << "an entry after its namespace ended";
      got.push_back(e.data());
    }
    for (const v1::ReadEnd& end : response.ends()) {
      EXPECT_TRUE(codes.emplace(end.namespace_id(), end.code()).second) << "ended twice";
    }
    if (response.ends_size() > 0) ++messages_with_ends;
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(got, entries);
  ASSERT_EQ(codes.size(), 56u);
  EXPECT_EQ(codes[1], 0);
  for (uint64_t ns = 100; ns < 105; ++ns) EXPECT_EQ(codes[ns], 0) << ns;
  for (uint64_t ns = 900; ns < 950; ++ns) EXPECT_EQ(codes[ns], grpc::StatusCode::NOT_FOUND) << ns;
  // The 55 at once; namespace 1's after its entries.
  EXPECT_LE(messages_with_ends, 2);
}

TEST_F(ContractTest, ReadManyFollowsAfterEachBacklog) {
  Create(1);
  Create(2);
  ASSERT_FALSE(Append(1, {"old 1"}).empty());
  ReadManyOptions options;
  options.namespaces = {{1, 0, 0}, {2, 0, 0}};
  options.follow = true;
  options.timeout = seconds(30);
  std::vector<std::string> seen;
  std::set<uint64_t> caught_up;
  std::thread writer;
  absl::Status status = client_->ReadMany(
      options,
      [&](v1::Entry& e) {
        seen.push_back(e.data());
        return seen.size() < 3;
      },
      [&](const v1::ReadEnd& end) {
        EXPECT_EQ(end.code(), 0) << end.message();
        EXPECT_TRUE(end.caught_up());
        caught_up.insert(end.namespace_id());
        if (caught_up.size() == 2) {  // both backlogs replayed: now new entries
          writer = std::thread([&] {
            Append(2, {"new 2"});
            Append(1, {"new 1"});
          });
        }
        return true;
      });
  if (writer.joinable()) writer.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(caught_up, (std::set<uint64_t>{1, 2}));
  // Namespaces interleave in any order; each one's entries come in order.
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], "old 1");
  EXPECT_EQ(std::set<std::string>(seen.begin() + 1, seen.end()),
            (std::set<std::string>{"new 1", "new 2"}));
}

TEST_F(ContractTest, ReadManyRefusesBadInput) {
  Create(1);
  const auto status_of = [&](std::vector<ReadManyOptions::Start> namespaces) {
    ReadManyOptions options;
    options.namespaces = std::move(namespaces);
    return ReadMany(*client_, options).status;
  };
  absl::Status zero = status_of({{1, 0, 0}, {0, 0, 0}});
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument) << zero;
  EXPECT_NE(zero.message().find("reads[1].namespace_id"), std::string::npos) << zero;
  absl::Status twice = status_of({{1, 0, 0}, {1, 5, 0}});
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument) << twice;
  EXPECT_NE(twice.message().find("twice"), std::string::npos) << twice;
  std::vector<ReadManyOptions::Start> too_many;
  for (uint64_t ns = 1; ns <= 1001; ++ns) too_many.push_back({ns, 0, 0});
  EXPECT_EQ(status_of(too_many).code(), absl::StatusCode::kInvalidArgument);
  // None: nothing to do, OK at once.
  EXPECT_TRUE(status_of({}).ok());
}

TEST_F(ContractTest, AFollowingReadManyEndsANamespaceDeletedEvenIfCreatedAgain) {
  for (uint64_t id : {330, 331}) {
    Create(id);
    Append(id, {"old"});
  }
  ReadManyOptions options;
  options.namespaces.resize(2);
  options.namespaces[0].namespace_id = 330;
  options.namespaces[1].namespace_id = 331;
  options.follow = true;
  options.timeout = seconds(20);
  std::mutex mu;
  std::condition_variable changed;
  std::map<uint64_t, std::vector<std::string>> got;
  std::map<uint64_t, absl::Status> ended;
  int caught_up = 0;
  std::thread reader([&] {
    absl::Status status = client_->ReadMany(
        options,
        [&](v1::Entry& e) {
          if (e.data() == "stop") return false;
          std::lock_guard<std::mutex> lock(mu);
          got[e.namespace_id()].push_back(e.data());
          changed.notify_all();
          return true;
        },
        [&](const v1::ReadEnd& end) {
          std::lock_guard<std::mutex> lock(mu);
          if (end.caught_up()) {
            ++caught_up;
          } else {
            ended[end.namespace_id()] =
                absl::Status(static_cast<absl::StatusCode>(end.code()), end.message());
          }
          changed.notify_all();
          return true;
        });
    EXPECT_TRUE(status.ok()) << status;
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    // EXPECT, not ASSERT: the reader thread must be joined below (it ends by its deadline).
    EXPECT_TRUE(changed.wait_for(lock, seconds(20), [&] { return caught_up == 2; }));
  }
  EXPECT_TRUE(client_->DeleteNamespace(330).ok());
  Create(330);
  Append(330, {"new"});
  Append(331, {"still followed"});
  {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(changed.wait_for(lock, seconds(15),
                                 [&] { return ended.count(330) && got[331].size() == 2; }));
    EXPECT_EQ(got[330], (std::vector<std::string>{"old"}));
    EXPECT_TRUE(absl::IsNotFound(ended[330])) << ended[330];
    EXPECT_EQ(got[331], (std::vector<std::string>{"old", "still followed"}));
  }
  Append(331, {"stop"});
  reader.join();
}

}  // namespace
}  // namespace wal::testing
