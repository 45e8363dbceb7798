// Records -> entries: reassembly of split entries, checksums, torn entries, fences, retried
// copies. The records come from record_format's encoder, as a slot holds them.
#include "server/log/entry_assembler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>
#include <tuple>

#include "server/common/crc32c.h"
#include "server/log/record_format.h"

namespace wal {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Feeds records at consecutive offsets starting at `first_offset`.
std::vector<AssembledEntry> Assemble(EntryAssembler& a, const std::vector<std::string>& records,
                                     int64_t first_offset = 0) {
  std::vector<AssembledEntry> out;
  for (size_t i = 0; i < records.size(); ++i) a.Add(first_offset + i, records[i], &out);
  return out;
}

TEST(EntryAssembler, EmptyEntryRoundTrips) {
  EntryAssembler a(100);
  auto out = Assemble(a, EncodeEntry("", 1, 64));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "");
}

TEST(EntryAssembler, LargeEntryIsSplitAndReassembled) {
  const std::string data = RandomBytes(10000, 1);
  auto records = EncodeEntry(data, 9, 1000);
  const size_t chunk = 1000 - kRecordHeaderBytes;
  ASSERT_EQ(records.size(), (data.size() + chunk - 1) / chunk);
  EXPECT_EQ(DecodeRecord(records.front())->header.kind, RecordKind::kFirst);
  EXPECT_EQ(DecodeRecord(records[1])->header.kind, RecordKind::kMiddle);
  EXPECT_EQ(DecodeRecord(records.back())->header.kind, RecordKind::kLast);
  for (const auto& r : records) EXPECT_LE(r.size(), 1000u);

  EntryAssembler a(1 << 20);
  auto out = Assemble(a, records, 100);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].entry_id, 100u);  // the offset of the first record
  EXPECT_EQ(out[0].data, data);
  EXPECT_EQ(a.skipped(), 0u);
  EXPECT_EQ(a.buffered_bytes(), 0u);
}

TEST(EntryAssembler, ExactMultipleOfChunkSize) {
  const std::string data = RandomBytes(3 * (100 - kRecordHeaderBytes), 2);
  auto records = EncodeEntry(data, 1, 100);
  EXPECT_EQ(records.size(), 3u);
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, records);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, data);
}

TEST(EntryAssembler, CorruptPayloadFailsCrcAndIsSkipped) {
  auto records = EncodeEntry(RandomBytes(500, 3), 1, 200);
  records[1][kRecordHeaderBytes + 5] ^= 0x40;
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, records);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.skipped(), 1u);
  // Reported by its id (its first record), once, so that a reader can say DATA_LOSS there.
  auto split = a.TakeCorrupt();
  ASSERT_EQ(split.size(), 1u);
  EXPECT_EQ(split[0].entry_id, 0);  // the id of its first record
  EXPECT_TRUE(a.TakeCorrupt().empty()) << "reported once";
  // A corrupt Full record too.
  auto full = EncodeEntry("abcdef", 2, 200);
  full[0].back() ^= 1;
  a.Add(10, full[0], &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.skipped(), 2u);
  auto corrupt = a.TakeCorrupt();
  ASSERT_EQ(corrupt.size(), 1u);
  EXPECT_EQ(corrupt[0].entry_id, 10);
}

TEST(EntryAssembler, AnEntryTruncatedOrOfTheWrongSizeIsSkippedButNotReportedCorrupt) {
  // Structure, not content: a Full record whose payload is shorter than its entry size.
  std::string full = EncodeEntry("abcdef", 2, 200)[0];
  full.pop_back();
  EntryAssembler a(1 << 20);
  std::vector<AssembledEntry> out;
  a.Add(0, full, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.skipped(), 1u);
  EXPECT_TRUE(a.TakeCorrupt().empty());
}

TEST(EntryAssembler, TheChecksumAnAppenderSentIsTheOneStored) {
  const std::string data = "entry";
  auto records = EncodeEntry(data, 1, 200, {}, {}, Crc32c(data));
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, records);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].crc32c, Crc32c(data));
  // Stored as given: a checksum that does not match (walserver refuses those before writing)
  // makes the entry read as corrupt, never as good data.
  auto wrong = EncodeEntry(data, 2, 200, {}, {}, Crc32c(data) ^ 1);
  EXPECT_TRUE(Assemble(a, wrong, 5).empty());
  auto corrupt = a.TakeCorrupt();
  ASSERT_EQ(corrupt.size(), 1u);
  EXPECT_EQ(corrupt[0].entry_id, 5);
  // Known values: CRC-32C of "123456789" is 0xE3069283 (RFC 3720, the iSCSI check value).
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(EntryAssembler, UndecodableRecordsAreSkipped) {
  EntryAssembler a(1 << 20);
  std::vector<AssembledEntry> out;
  a.Add(0, "", &out);                      // empty value
  a.Add(1, "plain text from kcat", &out);  // not our format
  std::string future = EncodeEntry("x", 1, 100)[0];
  future[0] = 2;  // an unknown format version
  a.Add(2, future, &out);
  std::string bad_kind = EncodeEntry("x", 1, 100)[0];
  bad_kind[1] = 9;
  a.Add(3, bad_kind, &out);
  std::string short_header = EncodeEntry("x", 1, 100)[0].substr(0, 20);
  a.Add(4, short_header, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.skipped(), 5u);
  // The assembler still works afterwards.
  a.Add(5, EncodeEntry("ok", 2, 100)[0], &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].entry_id, 5u);
}

TEST(EntryAssembler, MissingMiddleChunkDropsTheEntry) {
  auto records = EncodeEntry(RandomBytes(1000, 4), 1, 200);
  ASSERT_GE(records.size(), 4u);
  records.erase(records.begin() + 2);
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, records);
  a.Flush(&out);
  EXPECT_TRUE(out.empty());
  EXPECT_GE(a.skipped(), 1u);
}

TEST(EntryAssembler, ChunksWithoutTheirFirstAreSkipped) {
  // A read that starts in the middle of an entry.
  auto records = EncodeEntry(RandomBytes(1000, 5), 1, 200);
  records.erase(records.begin());
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, records);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.skipped(), records.size());
}

TEST(EntryAssembler, IncompleteEntryAtTheEndIsNeverReturned) {
  auto records = EncodeEntry(RandomBytes(1000, 6), 1, 200);
  records.pop_back();
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, records);
  EXPECT_TRUE(out.empty());
  EXPECT_GT(a.buffered_bytes(), 0u);
  a.Flush(&out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.skipped(), 1u);
  EXPECT_EQ(a.buffered_bytes(), 0u);
}

TEST(EntryAssembler, InterleavedWritersComeOutInIdOrder) {
  // Entry A (3 chunks) starts at offset 0; entry B (Full) lands at offset 1, between A's chunks.
  const std::string a_data = RandomBytes(400, 7);
  auto a_records = EncodeEntry(a_data, 100, kRecordHeaderBytes + 150);
  ASSERT_EQ(a_records.size(), 3u);
  auto b_records = EncodeEntry("bee", 200, 200);
  EntryAssembler a(1 << 20);
  std::vector<AssembledEntry> out;
  a.Add(0, a_records[0], &out);
  a.Add(1, b_records[0], &out);
  EXPECT_TRUE(out.empty()) << "B must wait for A, which starts earlier";
  a.Add(2, a_records[1], &out);
  a.Add(3, a_records[2], &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].entry_id, 0u);
  EXPECT_EQ(out[0].data, a_data);
  EXPECT_EQ(out[1].entry_id, 1u);
  EXPECT_EQ(out[1].data, "bee");
}

TEST(EntryAssembler, ALendingAssemblerPointsIntoTheRecordOnlyWhenNothingWaits) {
  const std::string alone = EncodeEntry("alone", 1, 200)[0];
  std::string corrupt = EncodeEntry("corrupt", 2, 200)[0];
  corrupt.back() ^= 1;
  const std::string a_data = RandomBytes(400, 7);
  const auto a_records = EncodeEntry(a_data, 100, kRecordHeaderBytes + 150);
  const std::string behind = EncodeEntry("behind", 3, 200)[0];
  EntryAssembler a(1 << 20);
  a.LendRecords();
  std::vector<AssembledEntry> out;
  a.Add(0, alone, &out);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].lent);
  EXPECT_EQ(out[0].bytes().data(), alone.data() + kRecordHeaderBytes) << "not a copy";
  EXPECT_EQ(out[0].bytes(), "alone");
  EXPECT_TRUE(out[0].data.empty());
  out.clear();
  a.Add(1, corrupt, &out);  // checked as any entry
  EXPECT_TRUE(out.empty());
  ASSERT_EQ(a.TakeCorrupt().size(), 1u);
  a.Add(2, a_records[0], &out);
  a.Add(3, behind, &out);  // waits behind entry 2, so it is a copy
  a.Add(4, a_records[1], &out);
  a.Add(5, a_records[2], &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FALSE(out[0].lent);
  EXPECT_EQ(out[0].bytes(), a_data);
  EXPECT_FALSE(out[1].lent);
  EXPECT_EQ(out[1].bytes(), "behind");
}

TEST(EntryAssembler, HeldBackEntriesAreReleasedWhenTheEarlierOneIsAbandoned) {
  auto a_records = EncodeEntry(RandomBytes(400, 8), 100, 200);
  EntryAssembler a(1 << 20);
  std::vector<AssembledEntry> out;
  a.Add(0, a_records[0], &out);  // never completed
  a.Add(1, EncodeEntry("one", 1, 200)[0], &out);
  a.Add(2, EncodeEntry("two", 2, 200)[0], &out);
  EXPECT_TRUE(out.empty());
  a.Flush(&out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].data, "one");
  EXPECT_EQ(out[1].data, "two");
}

TEST(EntryAssembler, EntryAboveTheLimitIsRejected) {
  auto records = EncodeEntry(RandomBytes(1000, 9), 1, 200);
  EntryAssembler a(999);
  auto out = Assemble(a, records);
  a.Flush(&out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.skipped(), records.size());
}

std::vector<std::string> Ids(const std::vector<AssembledEntry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.data);
  return out;
}

TEST(EntryAssembler, StampRoundTripsInEveryChunk) {
  const std::string data = RandomBytes(250, 9);
  const EntryStamp stamp{7, 0xfeedbeefcafe, 42};
  const auto records = EncodeEntry(data, 1, kRecordHeaderBytes + 100, stamp);
  ASSERT_EQ(records.size(), 3u);
  for (const std::string& r : records) {
    auto decoded = DecodeRecord(r);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(decoded->header.stamp.epoch, 7u);
    EXPECT_EQ(decoded->header.stamp.writer_id, 0xfeedbeefcafeu);
    EXPECT_EQ(decoded->header.stamp.sequence, 42u);
  }
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, records);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, data);
  EXPECT_EQ(out[0].stamp.epoch, 7u);
  EXPECT_EQ(out[0].stamp.sequence, 42u);
}

TEST(EntryAssembler, RecordsWithTheFirst28ByteHeaderStillDecode) {
  // A record of the first layout: the header ends at byte 28 and says so.
  std::string record = EncodeEntry("old", 5, 1000)[0];
  record.erase(28, kRecordHeaderBytes - 28);
  record[2] = 0;
  record[3] = 28;
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, {record});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "old");
  EXPECT_EQ(out[0].stamp.epoch, 0u);
  EXPECT_EQ(out[0].stamp.writer_id, 0u);
}

// Torn split entries: the first chunk of a 3-record entry of session 5 (origin 9, encoded at
// t=1000) whose other chunks never come, then one small entry from `next`.
class TornEntry : public ::testing::Test {
 protected:
  std::vector<AssembledEntry> FirstChunkThen(const RecordSource& next,
                                             const std::string& next_data = "after") {
    const auto torn =
        EncodeEntry(RandomBytes(250, 1), 100, kRecordHeaderBytes + 100, {}, {5, 9, 1000});
    EXPECT_EQ(torn.size(), 3u);
    return Assemble(a_, {EncodeEntry("before", 99, 1000, {}, {5, 9, 900})[0], torn[0],
                         EncodeEntry(next_data, 101, 1000, {}, next)[0]});
  }
  EntryAssembler a_{1 << 20};
};

TEST_F(TornEntry, ALaterRecordOfTheSameSessionShowsIt) {
  EXPECT_EQ(Ids(FirstChunkThen({5, 9, 1001})), (std::vector<std::string>{"before", "after"}));
  EXPECT_EQ(a_.torn(), 1u);
}

TEST_F(TornEntry, ARecordOfItsOriginFromANewSessionShowsIt) {
  EXPECT_EQ(Ids(FirstChunkThen({6, 9, 1001})), (std::vector<std::string>{"before", "after"}));
  EXPECT_EQ(a_.torn(), 1u);
}

TEST_F(TornEntry, AnotherWritersRecordWaitsBehindItUntilTheTimeBound) {
  // Another process may write between the chunks of a live entry: its entry waits.
  EXPECT_EQ(Ids(FirstChunkThen({7, 8, 1000 + EntryAssembler::kDefaultTornAfterMs})),
            (std::vector<std::string>{"before"}));
  EXPECT_EQ(a_.torn(), 0u);
  std::vector<AssembledEntry> out;
  a_.Add(10,
         EncodeEntry("late", 102, 1000, {}, {7, 8, 1001 + EntryAssembler::kDefaultTornAfterMs})[0],
         &out);
  EXPECT_EQ(Ids(out), (std::vector<std::string>{"after", "late"}));
  EXPECT_EQ(a_.torn(), 1u);
}

TEST_F(TornEntry, AnEntryOfAnotherWriterInBetweenStillCompletes) {
  const auto whole =
      EncodeEntry(RandomBytes(250, 1), 100, kRecordHeaderBytes + 100, {}, {5, 9, 1000});
  auto out = Assemble(
      a_, {whole[0], EncodeEntry("other", 101, 1000, {}, {7, 8, 1000})[0], whole[1], whole[2]});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].data, RandomBytes(250, 1));
  EXPECT_EQ(out[1].data, "other");
  EXPECT_EQ(a_.torn(), 0u);
}

TEST_F(TornEntry, AFenceOfAHigherEpochShowsIt) {
  auto out = FirstChunkThen({7, 8, 1000});
  std::vector<AssembledEntry> more;
  a_.Add(10, EncodeFence(1, {7, 8, 1000}), &more);
  EXPECT_EQ(Ids(more), (std::vector<std::string>{"after"}));
  EXPECT_EQ(a_.fenced(), 1u);
}

TEST(EntryAssembler, CreationTimesAtTheEdgesOfTheirRangeCompareWithoutOverflow) {
  // The creation time is read from the record as it is: a corrupt or hostile record can carry
  // any 64-bit value. Found by the record fuzzer (signed overflow in the time bound).
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const auto& [first, next, torn] : std::vector<std::tuple<int64_t, int64_t, bool>>{
           {kMin + 1, kMax, true},
           {kMax, kMin + 1, false},
           {-8753160913407277434, 5044031584433340416, true},
           {kMax, kMax, false}}) {
    EntryAssembler a(1 << 20);
    const auto split =
        EncodeEntry(RandomBytes(250, 1), 100, kRecordHeaderBytes + 100, {}, {5, 9, first});
    ASSERT_EQ(split.size(), 3u);
    const auto out = Assemble(a, {split[0], EncodeEntry("next", 101, 1000, {}, {7, 8, next})[0]});
    EXPECT_EQ(a.torn(), torn ? 1u : 0u) << first << " then " << next;
    EXPECT_EQ(Ids(out), torn ? std::vector<std::string>{"next"} : std::vector<std::string>{});
  }
}

TEST(EntryAssembler, AnEntryOfAnotherLiveWriterIsNeverGivenUpForTheBytesBehindIt) {
  // Another session writes far more than max_entry_bytes while a split entry is on its way: it
  // still completes, and everything comes out in id order.
  EntryAssembler a(/*max_entry_bytes=*/1000);
  const std::string slow_data = RandomBytes(900, 1);
  const auto slow = EncodeEntry(slow_data, 100, kRecordHeaderBytes + 300, {}, {5, 9, 1});
  ASSERT_EQ(slow.size(), 3u);
  std::vector<std::string> records = {slow[0]};
  for (int i = 0; i < 10; ++i) {
    records.push_back(EncodeEntry(RandomBytes(900, 2 + i), 200 + i, 2000, {}, {7, 8, 2})[0]);
  }
  EXPECT_TRUE(Assemble(a, records).empty()) << "held back behind the split entry";
  std::vector<AssembledEntry> out;
  a.Add(11, slow[1], &out);
  a.Add(12, slow[2], &out);
  ASSERT_EQ(out.size(), 11u);
  EXPECT_EQ(out[0].data, slow_data);
  EXPECT_EQ(a.torn(), 0u);
}

TEST(EntryAssembler, EntriesOfAnOlderEpochAfterAFenceAreDropped) {
  const auto e = [](const std::string& data, uint64_t epoch) {
    return EncodeEntry(data, data.size() * 131 + epoch, 1000, EntryStamp{epoch, 0, 0})[0];
  };
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, {e("a0", 0), e("a1", 1), EncodeFence(2), e("zombie", 1), e("b2", 2),
                          e("old client", 0), EncodeFence(3), e("b2 late", 2), e("c3", 3)});
  EXPECT_EQ(Ids(out), (std::vector<std::string>{"a0", "a1", "b2", "c3"}));
  EXPECT_EQ(a.fenced(), 3u);
  EXPECT_EQ(a.skipped(), 0u) << "fences are not undecodable records";
}

TEST(EntryAssembler, ReadStartingAfterTheFenceUsesTheKnownEpoch) {
  EntryAssembler a(1 << 20, /*min_epoch=*/2);
  auto out = Assemble(
      a, {EncodeEntry("zombie", 1, 1000, {1, 0, 0})[0], EncodeEntry("b", 2, 1000, {2, 0, 0})[0]});
  EXPECT_EQ(Ids(out), (std::vector<std::string>{"b"}));
}

TEST(EntryAssembler, SplitEntryThatEndsAfterAFenceIsDropped) {
  const auto zombie = EncodeEntry(RandomBytes(150, 3), 1, kRecordHeaderBytes + 100, {1, 0, 0});
  ASSERT_EQ(zombie.size(), 2u);
  EntryAssembler a(1 << 20);
  auto out = Assemble(a, {zombie[0], EncodeFence(2), zombie[1]});
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.fenced(), 1u);
}

TEST(EntryAssembler, RetriedCopiesAreReturnedOnce) {
  const auto e = [](const std::string& data, uint64_t writer, uint64_t seq, uint64_t nonce) {
    return EncodeEntry(data, nonce, 1000, EntryStamp{0, writer, seq})[0];
  };
  EntryAssembler a(1 << 20);
  // Writer 1 sends 1..4 with 3 ahead of 2 (concurrent appends), then retries 2 and 3; writer 2
  // uses the same sequences; entries without a writer are never deduplicated.
  auto out = Assemble(
      a, {e("w1s1", 1, 1, 10), e("w1s3", 1, 3, 11), e("w1s2", 1, 2, 12), e("w1s2", 1, 2, 13),
          e("w2s1", 2, 1, 14), e("w1s3", 1, 3, 15), e("w1s4", 1, 4, 16), e("anon", 0, 0, 17),
          e("anon", 0, 0, 18), e("w1s1", 1, 1, 19)});
  EXPECT_EQ(Ids(out),
            (std::vector<std::string>{"w1s1", "w1s3", "w1s2", "w2s1", "w1s4", "anon", "anon"}));
  EXPECT_EQ(a.duplicates(), 3u);
}

TEST(EntryAssembler, DuplicateSetStaysExactOverLongGappyRuns) {
  // Sequences arrive shuffled within windows of 8, every one twice, with a few never sent.
  std::mt19937 rng(5);
  std::vector<uint64_t> order;
  for (uint64_t base = 1; base <= 2000; base += 8) {
    std::vector<uint64_t> window;
    for (uint64_t s = base; s < base + 8; ++s) {
      if (s % 97 != 0) window.push_back(s);
    }
    std::shuffle(window.begin(), window.end(), rng);
    order.insert(order.end(), window.begin(), window.end());
    std::shuffle(window.begin(), window.end(), rng);
    order.insert(order.end(), window.begin(), window.end());
  }
  EntryAssembler a(1 << 20);
  std::vector<AssembledEntry> out;
  int64_t offset = 0;
  for (uint64_t s : order) {
    a.Add(offset, EncodeEntry("x", offset, 1000, EntryStamp{0, 9, s})[0], &out);
    ++offset;
  }
  std::set<uint64_t> seen;
  for (const auto& e : out) EXPECT_TRUE(seen.insert(e.stamp.sequence).second) << e.stamp.sequence;
  EXPECT_EQ(out.size(), order.size() / 2);
  EXPECT_EQ(a.duplicates(), order.size() / 2);
}

}  // namespace
}  // namespace wal
