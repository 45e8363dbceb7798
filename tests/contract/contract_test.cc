// The contract (docs/CONTRACT.md's table, proto/wal/v1/wal.proto), checked through the client
// library against an in-process walserver. Built twice: as a unit test on the librdkafka mock
// cluster (the embedded default), and as an integration test on the real Kafka broker that
// ./scripts/test.sh starts (WAL_TEST_REAL_KAFKA).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/common/crc32c.h"
#include "server/common/namespace_key.h"
#include "server/log/record_format.h"
#include "tests/contract/contract_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(ContractTest, RoundTripOfMixedBatches) { RoundTrip(*client_, 100, 10, 1000, 1); }

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

// Every codec of --compression round-trips entries, split ones included.
TEST_F(ContractTest, EveryCompressionCodecRoundTrips) {
  for (const std::string codec : {"none", "lz4", "zstd", "snappy", "gzip"}) {
    ServerOptions options = MockServerOptions();
#ifdef WAL_TEST_REAL_KAFKA
    options.brokers = TestBrokers();
    options.replication_factor = 1;
    options.min_insync_replicas = 1;
#endif
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
  EXPECT_EQ(std::vector<std::string>(read4.begin(), read4.begin() + 30), expected4);
  std::set<std::string> async(read4.begin() + 30, read4.end());
  EXPECT_EQ(async.size(), 10u) << "each async entry exactly once";
  EXPECT_EQ(test->ReadData(5), expected5);
  // The retried copies are in the slot: reads dropped them.
  const std::string metrics = test->server_->metrics().Render();
  EXPECT_EQ(metrics.find("walserver_read_duplicate_entries_total 0\n"), std::string::npos);
}

// Bad input over every RPC: the right code, a message that names the problem, nothing written.
TEST_F(ContractTest, BadInputGetsTheRightCodeAndWritesNothing) {
  constexpr uint64_t kMax = UINT64_MAX;
  Create(1);
  ASSERT_FALSE(Append(1, {"a", "b"}).empty());
  const uint64_t end = client_->GetNamespace(1)->next_entry_id();
  const auto append = [&](std::vector<std::pair<uint64_t, std::string>> entries) {
    v1::AppendRequest r;
    for (auto& [ns, data] : entries) {
      auto* e = r.add_entries();
      e->set_namespace_id(ns);
      e->set_data(std::move(data));
    }
    return client_->Append(r).status();
  };
  const auto wrong_checksum = [&] {
    v1::AppendRequest r;
    for (const char* data : {"fine", "flipped"}) {
      auto* e = r.add_entries();
      e->set_namespace_id(1);
      e->set_data(data);
    }
    r.mutable_entries(1)->set_crc32c(Crc32c("flipped") ^ 0x100);
    return client_->Append(r).status();
  };
  struct Case {
    std::string what;
    absl::Status status;
    absl::StatusCode want;
    std::string mentions;  // the message must contain this
  };
  ClientOptions once;
  once.target = server_->address();
  once.max_retries = 0;
  auto raw = Client::Connect(once);
  ASSERT_TRUE(raw.ok());
  std::vector<Case> cases = {
      {"Create id 0", client_->CreateNamespace(0).status(), absl::StatusCode::kInvalidArgument,
       "namespace_id 0"},
      {"Get id 0", client_->GetNamespace(0).status(), absl::StatusCode::kInvalidArgument, "0"},
      {"Get unknown max id", client_->GetNamespace(kMax).status(), absl::StatusCode::kNotFound,
       "18446744073709551615"},
      {"Append no entries", append({}), absl::StatusCode::kInvalidArgument, "no entries"},
      {"Append id 0", append({{1, "x"}, {0, "y"}}), absl::StatusCode::kInvalidArgument,
       "entries[1].namespace_id"},
      {"Append unknown max id", append({{1, "x"}, {kMax, "y"}}), absl::StatusCode::kNotFound,
       "18446744073709551615"},
      {"Append with a checksum its data does not match", wrong_checksum(),
       absl::StatusCode::kInvalidArgument, "entries[1]: crc32c"},
      {"Append over max_entry_bytes", append({{1, std::string((1 << 20) + 1, 'x')}}),
       absl::StatusCode::kInvalidArgument, "max_entry_bytes"},
      {"Append over the gRPC message limit",
       (*raw)->Append(1, {std::string(server_->max_entry_bytes() + (5 << 20), 'x')}).status(),
       absl::StatusCode::kResourceExhausted, "larger than max"},
      {"Read id 0", client_->ReadAll(0).status(), absl::StatusCode::kInvalidArgument, "0"},
      {"Read unknown", client_->ReadAll(kMax).status(), absl::StatusCode::kNotFound, "not found"},
      {"Read far past the end", client_->ReadAll(1, kMax).status(), absl::StatusCode::kOutOfRange,
       "past the end"},
      {"Read just past the end", client_->ReadAll(1, end + 1).status(),
       absl::StatusCode::kOutOfRange, "past the end"},
      {"Truncate id 0", client_->Truncate(0, 1).status(), absl::StatusCode::kInvalidArgument, "0"},
      {"Truncate far past the end", client_->Truncate(1, kMax).status(),
       absl::StatusCode::kOutOfRange, "past its end"},
      {"Truncate unknown", client_->Truncate(kMax, 1).status(), absl::StatusCode::kNotFound,
       "not found"},
      {"Delete id 0", client_->DeleteNamespace(0), absl::StatusCode::kInvalidArgument, "0"},
      {"Delete unknown", client_->DeleteNamespace(kMax), absl::StatusCode::kNotFound, "not found"},
      {"Acquire id 0", client_->AcquireNamespace(0).status(), absl::StatusCode::kInvalidArgument,
       "0"},
      {"Acquire unknown", client_->AcquireNamespace(kMax).status(), absl::StatusCode::kNotFound,
       "not found"},
  };
  {
    grpc::ClientContext ctx;
    v1::ListNamespacesRequest request;
    request.set_page_token("garbage");
    v1::ListNamespacesResponse response;
    cases.push_back({"List with a bad page token",
                     FromGrpcStatus(client_->stub().ListNamespaces(&ctx, request, &response)),
                     absl::StatusCode::kInvalidArgument, "page_token"});
  }
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), c.want) << c.what << ": " << c.status;
    EXPECT_NE(c.status.message().find(c.mentions), absl::string_view::npos)
        << c.what << ": the message should mention '" << c.mentions << "': " << c.status;
  }
  EXPECT_EQ(client_->GetNamespace(1)->next_entry_id(), end) << "a bad request wrote something";
  EXPECT_EQ(ReadData(1), (std::vector<std::string>{"a", "b"}));

  // The largest id is a valid namespace id.
  Create(kMax);
  ASSERT_FALSE(Append(kMax, {"at the top"}).empty());
  EXPECT_EQ(ReadData(kMax), (std::vector<std::string>{"at the top"}));

  // A cancelled stream frees its read.
  auto stream = client_->OpenRead({1, 0, 0, /*follow=*/true, {}});
  v1::Entry entry;
  ASSERT_TRUE(stream->Next(&entry));
  stream->Cancel();
  while (stream->Next(&entry)) {
  }
  EXPECT_EQ(stream->status().code(), absl::StatusCode::kCancelled);
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (server_->metrics().reads_in_progress.load() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(server_->metrics().reads_in_progress.load(), 0);
}

}  // namespace
}  // namespace wal::testing
