// The namespace calls: CreateNamespace, GetNamespace, ListNamespaces, DeleteNamespace,
// Truncate and AcquireNamespace with its fences.
// Runs on the mock cluster and on real Kafka (contract_fixture.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/namespace_key.h"
#include "server/log/record_format.h"
#include "tests/contract/contract_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(ContractTest, CreateIsIdempotent) {
  auto first = client_->CreateNamespace(5);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  Append(5, {"a"});
  auto second = client_->CreateNamespace(5);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->created);
  EXPECT_EQ(second->ns.topic(), first->ns.topic());
  EXPECT_EQ(second->ns.partition(), first->ns.partition());
  EXPECT_EQ(second->ns.first_entry_id(), first->ns.first_entry_id());
  EXPECT_GT(second->ns.next_entry_id(), first->ns.next_entry_id());
}

TEST_F(ContractTest, NamespaceZeroIsInvalidEverywhere) {
  v1::AppendRequest append;
  append.add_entries()->set_data("x");  // namespace_id 0
  EXPECT_EQ(client_->CreateNamespace(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Append(append).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->ReadAll(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Truncate(0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->GetNamespace(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->DeleteNamespace(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ContractTest, UnknownNamespaceIsNotFoundEverywhere) {
  Create(1);
  const uint64_t unknown = 424242;
  v1::AppendRequest append;
  auto* e = append.add_entries();
  e->set_namespace_id(unknown);
  e->set_data("x");
  EXPECT_EQ(client_->Append(append).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ReadAll(unknown).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Truncate(unknown, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GetNamespace(unknown).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->DeleteNamespace(unknown).code(), absl::StatusCode::kNotFound);
  // One unknown namespace in a batch fails the whole batch, and nothing is written.
  const uint64_t before = client_->GetNamespace(1)->next_entry_id();
  v1::AppendRequest mixed;
  for (uint64_t ns : {uint64_t{1}, unknown}) {
    auto* m = mixed.add_entries();
    m->set_namespace_id(ns);
    m->set_data("y");
  }
  auto status = client_->Append(mixed).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("424242"), absl::string_view::npos) << status;
  EXPECT_EQ(client_->GetNamespace(1)->next_entry_id(), before);
  EXPECT_TRUE(ReadData(1).empty());
}

TEST_F(ContractTest, DeletedNamespaceIsGone) {
  Create(9);
  Append(9, {"x"});
  ASSERT_TRUE(client_->DeleteNamespace(9).ok());
  EXPECT_EQ(client_->GetNamespace(9).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ReadAll(9).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Append(9, {"y"}).status().code(), absl::StatusCode::kNotFound);
  // It can be created anew, empty.
  auto again = client_->CreateNamespace(9);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->created);
  EXPECT_TRUE(ReadData(9).empty());
}

TEST_F(ContractTest, CreateInAChosenSlotPutsItThereForGood) {
  const std::string prefix = server_options_.topic_prefix;  // 2 topics of 2 partitions
  auto in_last = client_->CreateNamespace(21, prefix + "_1", 1);
  ASSERT_TRUE(in_last.ok()) << in_last.status();
  EXPECT_TRUE(in_last->created);
  EXPECT_EQ(in_last->ns.topic(), prefix + "_1");
  EXPECT_EQ(in_last->ns.partition(), 1);
  // The allocator would put a second namespace in an empty slot: the request chooses.
  auto beside = client_->CreateNamespace(22, prefix + "_1", 1);
  ASSERT_TRUE(beside.ok()) << beside.status();
  EXPECT_EQ(beside->ns.topic(), prefix + "_1");
  EXPECT_EQ(beside->ns.partition(), 1);
  // Asked again for its slot, or for none: the namespace as it is.
  for (bool with_slot : {true, false}) {
    auto again =
        with_slot ? client_->CreateNamespace(21, prefix + "_1", 1) : client_->CreateNamespace(21);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_FALSE(again->created);
    EXPECT_EQ(again->ns.topic(), prefix + "_1");
  }
  // Asked for another slot: refused, and it stays where it is.
  auto moved = client_->CreateNamespace(21, prefix + "_1", 0);
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kFailedPrecondition) << moved.status();
  EXPECT_NE(moved.status().message().find(prefix + "_1[1]"), absl::string_view::npos)
      << moved.status();
  auto now = client_->GetNamespace(21);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->partition(), 1);
  // Its entries are in the chosen slot, and read back.
  std::vector<uint64_t> ids = Append(21, {"a", "b"});
  EXPECT_EQ(ReadData(21), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_GE(ids[0], in_last->ns.first_entry_id());
}

TEST_F(ContractTest, CreateInASlotNotOursIsRefusedAndCreatesNothing) {
  const std::string prefix = server_options_.topic_prefix;
  const std::vector<std::pair<std::string, int32_t>> not_ours = {
      {prefix + "_2", 0},    {prefix + "_0", 2},     {prefix + "_0", -1},
      {prefix + "_meta", 0}, {prefix + "_index", 0}, {"elsewhere_0", 0}};
  for (const auto& [topic, partition] : not_ours) {
    auto refused = client_->CreateNamespace(31, topic, partition);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
        << topic << "[" << partition << "]: " << refused.status();
  }
  // A partition without its topic.
  EXPECT_EQ(client_->CreateNamespace(31, "", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->GetNamespace(31).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ContractTest, CreationsRacingForDifferentSlotsAgreeOnOne) {
  const std::string prefix = server_options_.topic_prefix;
  constexpr int kCallers = 8;
  std::vector<absl::StatusOr<CreateNamespaceResult>> results(kCallers,
                                                             absl::UnknownError("not run"));
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      results[i] = client_->CreateNamespace(41, absl::StrCat(prefix, "_", i % 2), (i / 2) % 2);
    });
  }
  for (auto& t : callers) t.join();
  auto winner = client_->GetNamespace(41);
  ASSERT_TRUE(winner.ok()) << winner.status();
  int created = 0;
  for (int i = 0; i < kCallers; ++i) {
    const bool wanted_winner =
        absl::StrCat(prefix, "_", i % 2) == winner->topic() && (i / 2) % 2 == winner->partition();
    if (wanted_winner) {
      ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
      EXPECT_EQ(results[i]->ns.topic(), winner->topic());
      created += results[i]->created ? 1 : 0;
    } else {
      EXPECT_EQ(results[i].status().code(), absl::StatusCode::kFailedPrecondition)
          << i << ": " << results[i].status();
    }
  }
  EXPECT_EQ(created, 1);
}

TEST_F(ContractTest, ListNamespacesPages) {
  for (uint64_t ns = 1; ns <= 25; ++ns) Create(ns * 10);
  ASSERT_TRUE(client_->DeleteNamespace(50).ok());
  v1::ListNamespacesRequest request;
  request.set_page_size(10);
  std::vector<uint64_t> seen;
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    v1::ListNamespacesResponse response;
    ASSERT_TRUE(client_->stub().ListNamespaces(&ctx, request, &response).ok());
    for (const auto& ns : response.namespaces()) seen.push_back(ns.namespace_id());
    request.set_page_token(response.next_page_token());
    ++pages;
  } while (!request.page_token().empty());
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), 24u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 50u), 0);
  auto all = client_->ListNamespaces();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 24u);
  // A token that no reply gave is rejected.
  grpc::ClientContext ctx;
  request.set_page_token("not-a-token");
  v1::ListNamespacesResponse response;
  EXPECT_EQ(client_->stub().ListNamespaces(&ctx, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ContractTest, TruncateSemantics) {
  const uint64_t start = Create(6);
  std::vector<std::string> data;
  for (int i = 0; i < 10; ++i) data.push_back(absl::StrCat("e", i));
  const std::vector<uint64_t> ids = Append(6, data);
  ASSERT_EQ(ids.size(), 10u);
  EXPECT_EQ(client_->GetNamespace(6)->first_entry_id(), start);

  auto truncated = client_->Truncate(6, ids[5]);
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_EQ(truncated->first_entry_id(), ids[5]);
  EXPECT_EQ(ReadData(6), std::vector<std::string>(data.begin() + 5, data.end()));
  EXPECT_EQ(ReadData(6, ids[7]), std::vector<std::string>(data.begin() + 7, data.end()));

  // A start below first_entry_id (other than 0) is out of range.
  EXPECT_EQ(client_->ReadAll(6, ids[3]).status().code(), absl::StatusCode::kOutOfRange);
  // A lower truncate, and truncate to 0, change nothing.
  EXPECT_EQ(client_->Truncate(6, ids[2])->first_entry_id(), ids[5]);
  EXPECT_EQ(client_->Truncate(6, 0)->first_entry_id(), ids[5]);
  EXPECT_EQ(ReadData(6).size(), 5u);
  // Truncating or reading past the end is out of range.
  const uint64_t end = client_->GetNamespace(6)->next_entry_id();
  EXPECT_EQ(client_->Truncate(6, end + 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client_->ReadAll(6, end + 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(ReadData(6, end).empty());
  // Truncating to the end hides everything; later entries are readable.
  EXPECT_EQ(client_->Truncate(6, end)->first_entry_id(), end);
  EXPECT_TRUE(ReadData(6).empty());
  Append(6, {"after"});
  EXPECT_EQ(ReadData(6), std::vector<std::string>{"after"});
}

TEST_F(ContractTest, AcquireRaisesTheEpochAndRefusesOlderWriters) {
  Create(1);
  EXPECT_EQ(client_->GetNamespace(1)->epoch(), 0u);
  Append(1, {"old client"});  // epoch 0 works while nobody acquired the namespace
  auto b = Connect(server_->address());
  auto acquired = b->AcquireNamespace(1);
  ASSERT_TRUE(acquired.ok()) << acquired.status();
  EXPECT_EQ(acquired->epoch, 1u);
  EXPECT_EQ(acquired->ns.epoch(), 1u);
  const uint64_t end = client_->GetNamespace(1)->next_entry_id();

  // The old writer (epoch 0) is refused, and nothing of its batch is written.
  auto refused = client_->Append(1, {"zombie 1", "zombie 2"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("epoch 1"), absl::string_view::npos);
  EXPECT_EQ(client_->GetNamespace(1)->next_entry_id(), end);

  auto ids = b->Append(1, {"new owner"});  // the client sends the epoch it acquired
  ASSERT_TRUE(ids.ok()) << ids.status();

  // An epoch nobody issued is refused too.
  v1::AppendRequest future;
  auto* e = future.add_entries();
  e->set_namespace_id(1);
  e->set_epoch(7);
  e->set_data("from the future");
  EXPECT_EQ(client_->Append(future).status().code(), absl::StatusCode::kFailedPrecondition);

  auto again = client_->AcquireNamespace(1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->epoch, 2u);
  EXPECT_EQ(b->Append(1, {"b fenced"}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->GetNamespace(1)->epoch(), 2u);

  auto entries = client_->ReadAll(1);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].data(), "old client");
  EXPECT_EQ((*entries)[0].epoch(), 0u);
  EXPECT_EQ((*entries)[1].data(), "new owner");
  EXPECT_EQ((*entries)[1].epoch(), 1u);
  EXPECT_EQ((*entries)[1].entry_id(), (*ids)[0]);

  EXPECT_EQ(client_->AcquireNamespace(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->AcquireNamespace(4242).status().code(), absl::StatusCode::kNotFound);
}

// Epochs of a namespace id never go down: a namespace deleted and created again goes on above
// its earlier incarnations' epochs, so their writers stay fenced.
TEST_F(ContractTest, ANamespaceCreatedAgainKeepsEarlierWritersFenced) {
  Create(3);
  auto old_writer = Connect(server_->address());
  ASSERT_TRUE(old_writer->AcquireNamespace(3).ok());
  auto second = old_writer->AcquireNamespace(3);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->epoch, 2u);
  ASSERT_TRUE(old_writer->Append(3, {"old incarnation"}).ok());
  ASSERT_TRUE(client_->DeleteNamespace(3).ok());
  Create(3);
  auto created = client_->GetNamespace(3);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_GT(created->epoch(), 2u);

  // The old writer still sends epoch 2: refused, before and after a new writer acquires.
  auto refused = old_writer->Append(3, {"zombie"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  auto acquired = client_->AcquireNamespace(3);
  ASSERT_TRUE(acquired.ok()) << acquired.status();
  EXPECT_GT(acquired->epoch, created->epoch());
  refused = old_writer->Append(3, {"zombie"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  ASSERT_TRUE(client_->Append(3, {"new incarnation"}).ok());
  // A record of epoch 2 that the old writer's walserver gets into the slot only now is not the
  // new incarnation's.
  const std::string late = EncodeEntry("late zombie", 99, 1000, {2, 77, 1})[0];
  ASSERT_TRUE(
      ProduceRaw(Bootstrap(), acquired->ns.topic(), acquired->ns.partition(), EncodeKey(3), late)
          .ok());
  ASSERT_TRUE(client_->Append(3, {"after it"}).ok());
  EXPECT_EQ(ReadData(3), (std::vector<std::string>{"new incarnation", "after it"}));

  // A client forgets the epoch of a namespace it deleted, and acquires the next incarnation
  // above every epoch before.
  const uint64_t last = client_->GetNamespace(3)->epoch();
  ASSERT_TRUE(client_->DeleteNamespace(3).ok());
  Create(3);
  refused = client_->Append(3, {"before acquiring"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  auto again = client_->AcquireNamespace(3);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->epoch, last);
  EXPECT_TRUE(client_->Append(3, {"third incarnation"}).ok());
}

TEST_F(ContractTest, RecordsOfAFencedEpochWrittenAfterTheFenceAreIgnored) {
  Create(2);
  auto a = Connect(server_->address());
  ASSERT_TRUE(a->AcquireNamespace(2).ok());
  auto before = a->Append(2, {"a before"});
  ASSERT_TRUE(before.ok()) << before.status();
  auto b = client_->AcquireNamespace(2);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->epoch, 2u);
  // A walserver that has not read epoch 2 yet writes for A after the fence: simulate it.
  const std::string zombie = EncodeEntry("a after the fence", 99, 1000, {1, 77, 1})[0];
  auto zombie_at = ProduceRaw(Bootstrap(), b->ns.topic(), b->ns.partition(), EncodeKey(2), zombie);
  ASSERT_TRUE(zombie_at.ok()) << zombie_at.status();
  ASSERT_TRUE(client_->Append(2, {"b after"}).ok());

  EXPECT_EQ(ReadData(2), (std::vector<std::string>{"a before", "b after"}));
  // A read that starts after the fence, at the zombie record, knows the epoch from the table.
  EXPECT_EQ(ReadData(2, static_cast<uint64_t>(*zombie_at)), (std::vector<std::string>{"b after"}));
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(metrics.find("walserver_read_fenced_entries_total 2"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace wal::testing
