// The calls for callers that place their namespaces in slots themselves (a datanode whose
// regions share a Kafka topic): a ReadMany of a whole slot, and GetSlot. Runs on the mock
// cluster and on real Kafka (contract_fixture.h).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/contract/contract_fixture.h"

namespace wal::testing {
namespace {

struct SlotReadResult {
  std::map<uint64_t, std::vector<std::pair<uint64_t, std::string>>> entries;  // id, data
  std::map<uint64_t, v1::ReadEnd> ends;
  absl::Status status;
};

SlotReadResult ReadSlot(Client& client, const std::string& topic, int32_t partition, uint64_t start,
                        bool follow = false) {
  ReadManyOptions options;
  options.slot = ReadManyOptions::SlotStart{topic, partition, start};
  options.follow = follow;
  SlotReadResult result;
  result.status = client.ReadMany(
      options,
      [&](v1::Entry& e) {
        EXPECT_EQ(result.ends.count(e.namespace_id()), 0u) << "an entry after its namespace ended";
        result.entries[e.namespace_id()].emplace_back(e.entry_id(), e.data());
        return true;
      },
      [&](const v1::ReadEnd& end) {
        EXPECT_TRUE(result.ends.emplace(end.namespace_id(), end).second) << "ended twice";
        return true;
      });
  return result;
}

class SlotCallsTest : public ContractTest {
 protected:
  void SetUp() override {
    ContractTest::SetUp();
    topic_ = server_options_.topic_prefix + "_0";
  }
  // Namespaces 41, 42 and 43 in `slot_`, 44 in another slot; ten rounds of one entry each,
  // appended together. `want_` has each namespace's ids and data.
  void AppendRounds() {
    for (uint64_t ns : {41, 42, 43}) {
      ASSERT_TRUE(client_->CreateNamespace(ns, topic_, 1).ok());
    }
    ASSERT_TRUE(client_->CreateNamespace(44, topic_, 0).ok());
    for (int round = 0; round < 10; ++round) {
      v1::AppendRequest request;
      for (uint64_t ns : {41, 42, 43, 44}) {
        v1::Entry* e = request.add_entries();
        e->set_namespace_id(ns);
        e->set_data(absl::StrCat(ns, "/", round));
      }
      auto ids = client_->Append(request);
      ASSERT_TRUE(ids.ok()) << ids.status();
      for (int i = 0; i < 4; ++i) {
        want_[request.entries(i).namespace_id()].emplace_back((*ids)[i], request.entries(i).data());
      }
    }
  }
  // The entries of `ns` from the one with id `from` on.
  std::vector<std::pair<uint64_t, std::string>> From(uint64_t ns, uint64_t from) {
    std::vector<std::pair<uint64_t, std::string>> out;
    for (const auto& e : want_[ns]) {
      if (e.first >= from) out.push_back(e);
    }
    return out;
  }

  // Set up after the server started (SetUp).
  std::string topic_;
  std::map<uint64_t, std::vector<std::pair<uint64_t, std::string>>> want_;
};

TEST_F(SlotCallsTest, AReadOfASlotGivesEveryNamespaceInItFromAnOffsetWithTheIdsAppendsGave) {
  AppendRounds();
  // 42 truncated its first five rounds; 43 is deleted; 44 lives elsewhere.
  const uint64_t fifth_of_42 = want_[42][5].first;
  ASSERT_TRUE(client_->Truncate(42, fifth_of_42).ok());
  const uint64_t third_of_41 = want_[41][3].first;
  SlotReadResult got = ReadSlot(*client_, topic_, 1, third_of_41);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.entries[41], From(41, third_of_41));
  EXPECT_EQ(got.entries[42], From(42, fifth_of_42));  // what it truncated is skipped
  EXPECT_EQ(got.entries[43], From(43, third_of_41));
  EXPECT_EQ(got.entries.count(44), 0u);
  ASSERT_EQ(got.ends.size(), 3u);
  for (const auto& [ns, end] : got.ends) EXPECT_EQ(end.code(), 0) << ns << ": " << end.message();

  // From 0: each namespace from its first entry; a deleted namespace is not read.
  ASSERT_TRUE(client_->DeleteNamespace(43).ok());
  got = ReadSlot(*client_, topic_, 1, 0);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.entries[41], want_[41]);
  EXPECT_EQ(got.entries[42], From(42, fifth_of_42));
  EXPECT_EQ(got.entries.count(43), 0u);
  EXPECT_EQ(got.ends.size(), 2u);

  // A namespace with nothing below the end is left out, without an end.
  ASSERT_TRUE(client_->CreateNamespace(45, topic_, 1).ok());
  got = ReadSlot(*client_, topic_, 1, 0);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.ends.count(45), 0u);
  EXPECT_EQ(got.ends.size(), 2u);
  // From the slot's end: nothing, OK.
  auto slot = client_->GetSlot(topic_, 1);
  ASSERT_TRUE(slot.ok()) << slot.status();
  got = ReadSlot(*client_, topic_, 1, slot->next_entry_id());
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_TRUE(got.entries.empty());
}

TEST_F(SlotCallsTest, GetSlotSaysWhereTheSlotEndsAndHowManyLiveThere) {
  auto empty = client_->GetSlot(topic_, 1);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->topic(), topic_);
  EXPECT_EQ(empty->partition(), 1);
  EXPECT_EQ(empty->namespace_count(), 0u);
  // A slot with no entry yet still has a record at offset 0, which is no namespace's: a caller
  // that takes the last offset (0) as where a new namespace's entries begin after replays from
  // 1, and misses none of them.
  EXPECT_EQ(empty->next_entry_id(), 1u);
  // Read, it ends at once with nothing.
  SlotReadResult nothing = ReadSlot(*client_, topic_, 1, 0);
  EXPECT_TRUE(nothing.status.ok()) << nothing.status;
  EXPECT_TRUE(nothing.entries.empty() && nothing.ends.empty());
  AppendRounds();
  EXPECT_GT(want_[41].front().first, 0u);
  auto in_slot = want_;
  in_slot.erase(44);
  EXPECT_EQ(ReadSlot(*client_, topic_, 1, empty->next_entry_id()).entries, in_slot);
  auto slot = client_->GetSlot(topic_, 1);
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_EQ(slot->namespace_count(), 3u);
  // The last entry appended there is the slot's last record.
  EXPECT_EQ(slot->next_entry_id(), want_[43].back().first + 1);
  EXPECT_LE(slot->low_offset(), want_[41].front().first);
  auto other = client_->GetSlot(topic_, 0);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->namespace_count(), 1u);
  EXPECT_EQ(other->next_entry_id(), want_[44].back().first + 1);
}

TEST_F(SlotCallsTest, BadSlotCallsAreRefusedClearly) {
  AppendRounds();
  const std::string prefix = server_options_.topic_prefix;
  for (const auto& [topic, partition] :
       std::vector<std::pair<std::string, int32_t>>{{prefix + "_2", 0}, {topic_, 2}, {"", 0}}) {
    auto slot = client_->GetSlot(topic, partition);
    EXPECT_EQ(slot.status().code(), absl::StatusCode::kInvalidArgument) << slot.status();
    SlotReadResult read = ReadSlot(*client_, topic, partition, 0);
    EXPECT_EQ(read.status.code(), absl::StatusCode::kInvalidArgument) << read.status;
    EXPECT_NE(read.status.message().find("not a slot of this walserver"), std::string::npos)
        << read.status;
  }
  auto slot = client_->GetSlot(topic_, 1);
  ASSERT_TRUE(slot.ok()) << slot.status();
  SlotReadResult past = ReadSlot(*client_, topic_, 1, slot->next_entry_id() + 1);
  EXPECT_EQ(past.status.code(), absl::StatusCode::kOutOfRange) << past.status;
  SlotReadResult following = ReadSlot(*client_, topic_, 1, 0, /*follow=*/true);
  EXPECT_EQ(following.status.code(), absl::StatusCode::kInvalidArgument) << following.status;
  ReadManyOptions both;
  both.slot = ReadManyOptions::SlotStart{topic_, 1, 0};
  both.namespaces.push_back({41, 0, 0});
  absl::Status mixed = client_->ReadMany(
      both, [](v1::Entry&) { return true; }, [](const v1::ReadEnd&) { return true; });
  EXPECT_EQ(mixed.code(), absl::StatusCode::kInvalidArgument) << mixed;
}

}  // namespace
}  // namespace wal::testing
