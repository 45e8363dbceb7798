// A slot index kept in Kafka: what is saved is what is restored, a damaged record is never
// used, and a restored index is taken only where it cannot contradict what the index knows.
#include "server/log/slot_index_store.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace wal {
namespace {

using Stretch = SlotIndex::Stretch;
constexpr TopicId kLog{7, 11};
constexpr TopicId kOtherLog{7, 12};

// An index of log kLog with two stretches and three namespaces.
void Fill(SlotIndex& index) {
  index.OnLog(kLog);
  index.Record(100, 5000, {{1, 100}, {1, 101}, {2, 300}, {1, 4000}, {3, 4999}}, 4900 * 100,
               index.log_changes());
  index.Record(9000, 9500, {{2, 9100}, {3, 9001}}, 500 * 100, index.log_changes());
}

std::vector<std::pair<int64_t, int64_t>> Stretches(const SlotIndex& index) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const SlotIndex::Covered& c : index.stretches()) out.emplace_back(c.from, c.to);
  return out;
}

// What a read of each namespace from each offset is told, for comparing two indexes.
std::vector<std::pair<int64_t, int64_t>> AnswersOf(const SlotIndex& index) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (uint64_t ns = 1; ns <= 4; ++ns) {
    for (int64_t from : {0, 99, 100, 102, 301, 4001, 5000, 8999, 9050, 9500, 20000}) {
      const Stretch s = index.NextStretch(ns, from);
      out.emplace_back(s.begin, s.end);
    }
  }
  return out;
}

TEST(SlotIndexStore, ARestoredIndexAnswersAsTheSavedOneDid) {
  SlotIndex saved;
  Fill(saved);
  const auto snapshot = saved.TakeSnapshot();
  ASSERT_TRUE(snapshot.has_value());
  const auto decoded = DecodeSnapshot(EncodeSnapshot(*snapshot));
  ASSERT_TRUE(decoded.has_value());

  SlotIndex restored;
  ASSERT_TRUE(restored.Restore(*decoded));
  EXPECT_EQ(AnswersOf(restored), AnswersOf(saved));
  EXPECT_EQ(restored.runs(), saved.runs());
  EXPECT_EQ(restored.OffsetsHolding(1 << 20), saved.OffsetsHolding(1 << 20));
  EXPECT_EQ(restored.changes(), 0u) << "nothing to save again";
  // A read that finds the same log keeps it; one that finds another drops it.
  EXPECT_FALSE(restored.OnLog(kLog));
  EXPECT_EQ(AnswersOf(restored), AnswersOf(saved));
  EXPECT_TRUE(restored.OnLog(kOtherLog));
  EXPECT_EQ(restored.NextStretch(2, 0).end, SlotIndex::kNoEnd) << "vouches for nothing";
}

TEST(SlotIndexStore, RandomIndexesComeBackWhole) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 50; ++round) {
    SlotIndex saved;
    saved.OnLog(TopicId{rng(), rng()});
    int64_t at = static_cast<int64_t>(rng() % 1000);
    for (int stretch = 0; stretch < 1 + static_cast<int>(rng() % 10); ++stretch) {
      const int64_t from = at, to = from + 1 + static_cast<int64_t>(rng() % 100000);
      std::vector<SlotIndex::Seen> seen;
      for (int k = 0; k < 200; ++k) {
        seen.push_back({rng() % 20 == 0 ? rng() : rng() % 30,
                        from + static_cast<int64_t>(rng() % static_cast<uint64_t>(to - from))});
      }
      saved.Record(from, to, seen, rng() % 1000000, saved.log_changes());
      at = to + static_cast<int64_t>(rng() % 3) * static_cast<int64_t>(rng() % 5000);
    }
    if (round % 3 == 0) saved.ForgetBelow(static_cast<int64_t>(rng() % 50000));
    const auto snapshot = saved.TakeSnapshot();
    if (!snapshot) continue;  // all forgotten
    const auto decoded = DecodeSnapshot(EncodeSnapshot(*snapshot));
    ASSERT_TRUE(decoded.has_value()) << "round " << round;
    SlotIndex restored;
    ASSERT_TRUE(restored.Restore(*decoded));
    ASSERT_EQ(Stretches(restored), Stretches(saved)) << "round " << round;
    ASSERT_EQ(restored.runs(), saved.runs()) << "round " << round;
    for (uint64_t ns : {0ull, 1ull, 5ull, 29ull, 31ull}) {
      for (int64_t from = 0; from < at + 10; from += 997) {
        const Stretch a = saved.NextStretch(ns, from), b = restored.NextStretch(ns, from);
        ASSERT_EQ(std::make_pair(a.begin, a.end), std::make_pair(b.begin, b.end))
            << "round " << round << " namespace " << ns << " from " << from;
      }
    }
  }
}

TEST(SlotIndexStore, DamagedOrForeignBytesAreNeverUsed) {
  SlotIndex saved;
  Fill(saved);
  const std::string bytes = EncodeSnapshot(*saved.TakeSnapshot());
  // Every record cut short.
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeSnapshot(bytes.substr(0, n)).has_value()) << n << " bytes";
  }
  EXPECT_FALSE(DecodeSnapshot(bytes + "x").has_value()) << "bytes past the end";
  // Format 1 was saved by servers that skipped packed records; 3 is a format yet to come.
  for (const char format : {1, 3}) {
    std::string other_format = bytes;
    other_format[0] = format;
    EXPECT_FALSE(DecodeSnapshot(other_format).has_value()) << "format " << int{format};
  }
  // Stretches that touch (an index joins them) or are empty are not an index's.
  SlotIndex::Snapshot odd = *saved.TakeSnapshot();
  odd.stretches = {{0, 10}, {10, 20}};
  EXPECT_FALSE(DecodeSnapshot(EncodeSnapshot(odd)).has_value());
  odd.stretches = {{0, 10}, {11, 11}};
  EXPECT_FALSE(DecodeSnapshot(EncodeSnapshot(odd)).has_value());
  odd.stretches = {{0, 10}, {11, 12}};
  EXPECT_TRUE(DecodeSnapshot(EncodeSnapshot(odd)).has_value());
  // An offset at kNoEnd, where no record lies (and one past it overflows).
  SlotIndex::Snapshot far = odd;
  far.runs = {{1, {{5, SlotIndex::kNoEnd}}}};
  EXPECT_FALSE(DecodeSnapshot(EncodeSnapshot(far)).has_value());
  far.runs = {{1, {{5, SlotIndex::kNoEnd - 1}}}};
  EXPECT_TRUE(DecodeSnapshot(EncodeSnapshot(far)).has_value());
  // A varint whose tenth byte holds more than the 64th bit (here the bytes recorded).
  SlotIndex::Snapshot big = odd;
  big.bytes_recorded = ~uint64_t{0};
  std::string wide = EncodeSnapshot(big);
  ASSERT_TRUE(DecodeSnapshot(wide).has_value());
  constexpr size_t kTenthByte = 1 + 16 + 9;  // after the format byte and the topic id
  ASSERT_EQ(static_cast<uint8_t>(wide[kTenthByte]), 1);
  wide[kTenthByte] = 2;
  EXPECT_FALSE(DecodeSnapshot(wide).has_value());
  // No offsets recorded, which a stretch implies.
  SlotIndex::Snapshot none_recorded = odd;
  none_recorded.offsets_recorded = 0;
  EXPECT_FALSE(DecodeSnapshot(EncodeSnapshot(none_recorded)).has_value());
}

TEST(SlotIndexStore, AnIndexThatKnowsSomethingTakesNoSnapshot) {
  SlotIndex saved;
  Fill(saved);
  const SlotIndex::Snapshot snapshot = *saved.TakeSnapshot();

  SlotIndex scanned;  // a scan recorded before the load came
  scanned.OnLog(kLog);
  scanned.Record(0, 10, {{1, 5}}, 1000, scanned.log_changes());
  EXPECT_FALSE(scanned.Restore(snapshot));
  EXPECT_EQ(Stretches(scanned), (std::vector<std::pair<int64_t, int64_t>>{{0, 10}}));

  SlotIndex other;  // a read found another log (the topic made again since the save)
  other.OnLog(kOtherLog);
  EXPECT_FALSE(other.Restore(snapshot));

  SlotIndex unknown;  // a read could not learn the log: which one it is, nobody knows
  unknown.LogWentBack();
  EXPECT_FALSE(unknown.Restore(snapshot));

  SlotIndex same;  // a read found the snapshot's log and nothing was recorded yet
  same.OnLog(kLog);
  EXPECT_TRUE(same.Restore(snapshot));
  EXPECT_EQ(AnswersOf(same), AnswersOf(saved));

  SlotIndex fresh;
  EXPECT_TRUE(fresh.Restore(snapshot));
  EXPECT_FALSE(fresh.Restore(snapshot)) << "once only";

  SlotIndex none;  // nothing to save without a log id or a stretch
  EXPECT_FALSE(none.TakeSnapshot().has_value());
  none.Record(0, 10, {{1, 5}}, 1000, none.log_changes());
  EXPECT_FALSE(none.TakeSnapshot().has_value()) << "no log id";
}

// A scan that began before the restore read what the restored index may not be of.
TEST(SlotIndexStore, AScanBegunBeforeARestoreAddsNothing) {
  SlotIndex saved;
  Fill(saved);
  SlotIndex index;
  const uint64_t scan_began = index.log_changes();
  ASSERT_TRUE(index.Restore(*saved.TakeSnapshot()));
  index.Record(20000, 30000, {{1, 25000}}, 1000, scan_began);
  EXPECT_EQ(Stretches(index), Stretches(saved));
  index.Record(20000, 30000, {{1, 25000}}, 1000, index.log_changes());
  EXPECT_NE(Stretches(index), Stretches(saved)) << "a scan begun after it adds";
}

}  // namespace
}  // namespace wal
