// Read: limits and starts, follow reads, shared slots, foreign and corrupt records, skip_lost,
// reads from a time, and a follow read of a deleted namespace.
// Runs on the mock cluster and on real Kafka (contract_fixture.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/common/namespace_key.h"
#include "server/log/record_format.h"
#include "tests/contract/contract_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(ContractTest, ReadLimitAndStart) {
  Create(7);
  const auto ids = Append(7, {"a", "b", "c", "d"});
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ReadData(7, 0, 2), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ReadData(7, ids[1], 2), (std::vector<std::string>{"b", "c"}));
  // A start between two ids begins at the next entry.
  EXPECT_EQ(ReadData(7, ids[3]), std::vector<std::string>{"d"});
}

TEST_F(ContractTest, FollowReadSeesLaterAppends) {
  Create(8);
  Append(8, {"before"});
  std::atomic<int> seen{0};
  std::vector<std::string> got;
  std::mutex mu;
  ReadOptions options;
  options.namespace_id = 8;
  options.follow = true;
  std::thread reader([&] {
    absl::Status status = client_->Read(options, [&](v1::Entry& e) {
      std::lock_guard<std::mutex> lock(mu);
      got.push_back(e.data());
      return ++seen < 4;
    });
    EXPECT_TRUE(status.ok()) << status;
  });
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  while (seen < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  Append(8, {"one", "two"});
  Append(8, {"three"});
  reader.join();
  EXPECT_EQ(got, (std::vector<std::string>{"before", "one", "two", "three"}));
}

TEST_F(ContractTest, ConcurrentReadsOfSharedSlotsEachGetTheirOwnEntries) {
  // 24 namespaces on 4 slots, read all at once (as a datanode opening its regions does), with a
  // following read running beside them: reads of one slot share a scan, and none may see
  // another's entries, miss its own, or stall another.
  constexpr int kNamespaces = 24;
  std::map<uint64_t, std::vector<std::string>> expected;
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) Create(ns);
  std::mt19937_64 rng(24);
  for (int round = 0; round < 10; ++round) {
    v1::AppendRequest request;
    for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
      auto* e = request.add_entries();
      e->set_namespace_id(ns);
      e->set_data(absl::StrCat(ns, "/", round, "/", RandomData(rng, rng() % 5000)));
      expected[ns].push_back(e->data());
    }
    ASSERT_TRUE(client_->Append(request).ok());
  }
  std::atomic<bool> follower_saw_new{false};
  ReadOptions follow;
  follow.namespace_id = 1;
  follow.follow = true;
  std::thread follower([&] {
    (void)client_->Read(follow, [&](v1::Entry& e) {
      if (e.data() == "later") follower_saw_new = true;
      return !follower_saw_new;
    });
  });
  std::vector<std::thread> readers;
  std::vector<std::vector<std::string>> got(kNamespaces + 1);
  std::vector<absl::Status> status(kNamespaces + 1);
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
    readers.emplace_back([&, ns] {
      ReadOptions read;
      read.namespace_id = ns;
      status[ns] = client_->Read(read, [&](v1::Entry& e) {
        got[ns].push_back(e.data());
        return true;
      });
    });
  }
  for (auto& t : readers) t.join();
  for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
    ASSERT_TRUE(status[ns].ok()) << status[ns];
    EXPECT_EQ(got[ns], expected[ns]) << "namespace " << ns;
  }
  Append(1, {"later"});
  follower.join();
  EXPECT_TRUE(follower_saw_new);
}

TEST_F(ContractTest, ForeignRecordsInASlotAreSkipped) {
  // An id whose big-endian bytes read "ABCDEFGH", so kcat can write records with its key.
  const uint64_t ns = 0x4142434445464748ULL;
  auto created = client_->CreateNamespace(ns);
  ASSERT_TRUE(created.ok()) << created.status();
  Append(ns, {"one", "two"});
  const std::string kcat = absl::StrCat(
      "printf 'ABCDEFGH:not a walserver record\\nABCDEFGH:\\x01\\x01garbage\\nunkeyed\\n' | "
      "kcat -P -b ",
      Bootstrap(), " -t ", created->ns.topic(), " -p ", created->ns.partition(), " -K: -Z 2>&1");
  ASSERT_EQ(std::system(kcat.c_str()), 0) << kcat;
  // The records are really in the slot, between our entries.
  const uint64_t after_kcat = client_->GetNamespace(ns)->next_entry_id();
  Append(ns, {"three"});
  EXPECT_GE(client_->GetNamespace(ns)->next_entry_id(), after_kcat + 1);
  EXPECT_EQ(ReadData(ns), (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_GE(server_->reader().records_skipped(), 2u);
}

TEST_F(ContractTest, AnEntryCorruptedInKafkaEndsTheReadWithDataLoss) {
  auto created = client_->CreateNamespace(3);
  ASSERT_TRUE(created.ok()) << created.status();
  Append(3, {"one"});
  // A record whose payload changed in Kafka after it was written (a bit flipped on a disk):
  // written straight to the slot, with its header's checksum of the original data.
  std::string flipped = EncodeEntry("two", 7, 1000, {0, 55, 1})[0];
  flipped.back() ^= 0x20;
  auto bad =
      ProduceRaw(Bootstrap(), created->ns.topic(), created->ns.partition(), EncodeKey(3), flipped);
  ASSERT_TRUE(bad.ok()) << bad.status();
  Append(3, {"three"});

  // The read delivers the entries before it, then ends with DATA_LOSS naming it; never the bad
  // data, and never silently past it.
  std::vector<std::string> got;
  ReadOptions read;
  read.namespace_id = 3;
  const absl::Status status = client_->Read(read, [&](v1::Entry& e) {
    got.push_back(e.data());
    return true;
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(absl::StrCat("entry ", *bad, " of namespace 3")),
            absl::string_view::npos)
      << status;
  EXPECT_NE(status.message().find("corrupt"), absl::string_view::npos) << status;
  EXPECT_EQ(got, (std::vector<std::string>{"one"}));
  // A read from past it goes on; ReadMany ends that namespace's part with DATA_LOSS.
  EXPECT_EQ(ReadData(3, static_cast<uint64_t>(*bad) + 1), (std::vector<std::string>{"three"}));
  Create(4);
  Append(4, {"other"});
  ReadManyOptions many;
  many.namespaces = {{3, 0, 0}, {4, 0, 0}};
  std::map<uint64_t, int> ends;
  std::vector<std::string> many_got;
  ASSERT_TRUE(client_
                  ->ReadMany(
                      many,
                      [&](v1::Entry& e) {
                        many_got.push_back(e.data());
                        return true;
                      },
                      [&](const v1::ReadEnd& end) {
                        ends[end.namespace_id()] = end.code();
                        return true;
                      })
                  .ok());
  EXPECT_EQ(ends, (std::map<uint64_t, int>{{3, grpc::StatusCode::DATA_LOSS}, {4, 0}}));
  std::sort(many_got.begin(), many_got.end());
  EXPECT_EQ(many_got, (std::vector<std::string>{"one", "other"}));

  // A split entry with one chunk corrupted reads the same way.
  Create(5);
  std::vector<std::string> chunks = EncodeEntry(std::string(150000, 'c'), 8, 64 * 1024, {0, 56, 1});
  ASSERT_EQ(chunks.size(), 3u);
  chunks[1][kRecordHeaderBytes + 10] ^= 0x01;
  int64_t first = -1;
  for (const std::string& chunk : chunks) {
    auto at = ProduceRaw(Bootstrap(), client_->GetNamespace(5)->topic(),
                         client_->GetNamespace(5)->partition(), EncodeKey(5), chunk);
    ASSERT_TRUE(at.ok()) << at.status();
    if (first < 0) first = *at;
  }
  auto split = client_->ReadAll(5);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kDataLoss) << split.status();
  EXPECT_NE(split.status().message().find(absl::StrCat("entry ", first, " ")),
            absl::string_view::npos)
      << split.status();
}

// skip_lost: a corrupt entry becomes a gap in its place, and the read goes on.
TEST_F(ContractTest, SkipLostReadsPastACorruptEntryWithAGap) {
  auto created = client_->CreateNamespace(6);
  ASSERT_TRUE(created.ok()) << created.status();
  Append(6, {"one"});
  std::string flipped = EncodeEntry("two", 9, 1000, {0, 57, 1})[0];
  flipped.back() ^= 0x01;
  auto bad =
      ProduceRaw(Bootstrap(), created->ns.topic(), created->ns.partition(), EncodeKey(6), flipped);
  ASSERT_TRUE(bad.ok()) << bad.status();
  Append(6, {"three"});

  std::vector<std::string> got;  // entries, and gaps as "gap FROM TO REASON"
  ReadOptions read;
  read.namespace_id = 6;
  read.skip_lost = true;
  read.on_gap = [&](const v1::Gap& gap) {
    EXPECT_EQ(gap.namespace_id(), 6u);
    EXPECT_NE(gap.message().find("corrupt"), std::string::npos) << gap.message();
    got.push_back(absl::StrCat("gap ", gap.from_entry_id(), " ", gap.to_entry_id(), " ",
                               v1::Gap::Reason_Name(gap.reason())));
  };
  const absl::Status status = client_->Read(read, [&](v1::Entry& e) {
    got.push_back(e.data());
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(got, (std::vector<std::string>{
                     "one", absl::StrCat("gap ", *bad, " ", *bad + 1, " UNDECODABLE"), "three"}));
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(metrics.find("walserver_read_gaps_total 1"), std::string::npos) << metrics;
  // Gaps nobody hears of are no recovery: skip_lost needs on_gap.
  ReadOptions unheard = read;
  unheard.on_gap = nullptr;
  EXPECT_EQ(client_->ReadAll(6).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(client_->Read(unheard, [](v1::Entry&) { return true; }).code(),
            absl::StatusCode::kInvalidArgument);

  // The same in a ReadMany, where only this namespace asked for it.
  Create(7);
  Append(7, {"seven"});
  ReadManyOptions many;
  many.namespaces = {{6, 0, 0, 0, /*skip_lost=*/true}, {7, 0, 0}};
  std::vector<std::string> gaps;
  many.on_gap = [&](const v1::Gap& gap) {
    gaps.push_back(absl::StrCat(gap.namespace_id(), ":", gap.from_entry_id()));
  };
  std::map<uint64_t, int> ends;
  int entries = 0;
  ASSERT_TRUE(client_
                  ->ReadMany(
                      many,
                      [&](v1::Entry&) {
                        ++entries;
                        return true;
                      },
                      [&](const v1::ReadEnd& end) {
                        ends[end.namespace_id()] = end.code();
                        return true;
                      })
                  .ok());
  EXPECT_EQ(gaps, (std::vector<std::string>{absl::StrCat("6:", *bad)}));
  EXPECT_EQ(ends, (std::map<uint64_t, int>{{6, 0}, {7, 0}}));
  EXPECT_EQ(entries, 3);
}

uint64_t NowMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Reads from a time: the first entry appended at or after it, and every entry after that one.
TEST_F(ContractTest, ReadsFromATime) {
  Create(1);
  Create(2);
  Append(1, {"old"});
  Append(2, {"other old"});
  std::this_thread::sleep_for(milliseconds(50));
  const uint64_t t = NowMs();
  std::this_thread::sleep_for(milliseconds(5));
  Append(1, {"new", "newer"});
  Append(2, {"other new"});

  const auto read_from = [&](uint64_t ns, uint64_t time_ms) {
    ReadOptions read;
    read.namespace_id = ns;
    read.start_time_ms = time_ms;
    std::vector<std::string> got;
    const absl::Status status = client_->Read(read, [&](v1::Entry& e) {
      got.push_back(e.data());
      return true;
    });
    EXPECT_TRUE(status.ok()) << status;
    return got;
  };
  EXPECT_EQ(read_from(1, t), (std::vector<std::string>{"new", "newer"}));
  EXPECT_EQ(read_from(2, t), (std::vector<std::string>{"other new"}));
  EXPECT_EQ(read_from(1, 1), (std::vector<std::string>{"old", "new", "newer"}));
  EXPECT_TRUE(read_from(1, NowMs() + 3600 * 1000).empty()) << "an hour from now";

  // With a limit, and per namespace in a ReadMany.
  ReadOptions limited;
  limited.namespace_id = 1;
  limited.start_time_ms = t;
  limited.limit = 1;
  auto one = client_->OpenRead(limited);
  v1::Entry entry;
  ASSERT_TRUE(one->Next(&entry));
  EXPECT_EQ(entry.data(), "new");
  EXPECT_FALSE(one->Next(&entry));
  EXPECT_TRUE(one->status().ok()) << one->status();
  ReadManyOptions many;
  many.namespaces = {{1, 0, 0, t}, {2, 0, 0, 1}};
  std::map<uint64_t, std::vector<std::string>> got;
  ASSERT_TRUE(client_
                  ->ReadMany(
                      many,
                      [&](v1::Entry& e) {
                        got[e.namespace_id()].push_back(e.data());
                        return true;
                      },
                      [](const v1::ReadEnd& end) {
                        EXPECT_EQ(end.code(), 0) << end.message();
                        return true;
                      })
                  .ok());
  EXPECT_EQ(got[1], (std::vector<std::string>{"new", "newer"}));
  EXPECT_EQ(got[2], (std::vector<std::string>{"other old", "other new"}));

  // Bad input: both starts, or a time Kafka cannot hold.
  ReadOptions both = limited;
  both.start_entry_id = 1;
  auto stream = client_->OpenRead(both);
  EXPECT_FALSE(stream->Next(&entry));
  EXPECT_EQ(stream->status().code(), absl::StatusCode::kInvalidArgument) << stream->status();
  EXPECT_NE(stream->status().message().find("give one or the other"), absl::string_view::npos);
  ReadOptions huge = limited;
  huge.start_time_ms = uint64_t{1} << 63;
  stream = client_->OpenRead(huge);
  EXPECT_FALSE(stream->Next(&entry));
  EXPECT_EQ(stream->status().code(), absl::StatusCode::kInvalidArgument) << stream->status();
  ReadManyOptions bad_many;
  bad_many.namespaces = {{1, 0, 0, 0}, {2, 5, 0, t}};
  const absl::Status many_status = client_->ReadMany(
      bad_many, [](v1::Entry&) { return true; }, [](const v1::ReadEnd&) { return true; });
  EXPECT_EQ(many_status.code(), absl::StatusCode::kInvalidArgument) << many_status;
  EXPECT_NE(many_status.message().find("reads[1].start_time_ms"), absl::string_view::npos)
      << many_status;
}

// A read belongs to the incarnation it started on: when its namespace is deleted it ends
// NOT_FOUND, also when the namespace was created again (and written to) before the read looked.
TEST_F(ContractTest, AFollowReadEndsWhenItsNamespaceIsDeletedEvenIfCreatedAgain) {
  for (uint64_t id = 300; id < 320; ++id) {
    Create(id);
    Append(id, {"old"});
    ReadOptions options;
    options.namespace_id = id;
    options.follow = true;
    options.timeout = seconds(20);
    auto follower = client_->OpenRead(options);
    v1::Entry entry;
    ASSERT_TRUE(follower->Next(&entry)) << follower->status();
    ASSERT_EQ(entry.data(), "old");
    ASSERT_TRUE(client_->DeleteNamespace(id).ok());
    Create(id);
    Append(id, {"new"});
    const bool more = follower->Next(&entry);
    EXPECT_FALSE(more) << "namespace " << id << ": the read went on into the new incarnation with "
                       << entry.data();
    if (more) {
      follower->Cancel();
      continue;
    }
    EXPECT_EQ(follower->status().code(), absl::StatusCode::kNotFound)
        << "namespace " << id << ": " << follower->status();
  }
}

}  // namespace
}  // namespace wal::testing
