// What the slot index vouches for: only the stretch scans read whole, and within it every
// record of each namespace.
#include "server/log/slot_index.h"

#include <gtest/gtest.h>

#include <ostream>
#include <vector>

namespace wal {

// Found by gtest where Stretch lives.
bool operator==(const SlotIndex::Stretch& a, const SlotIndex::Stretch& b) {
  return a.begin == b.begin && a.end == b.end;
}
bool operator==(const SlotIndex::Covered& a, const SlotIndex::Covered& b) {
  return a.from == b.from && a.to == b.to;
}
std::ostream& operator<<(std::ostream& os, const SlotIndex::Stretch& s) {
  return os << "[" << s.begin << ", " << s.end << ")";
}

namespace {

using Stretch = SlotIndex::Stretch;
constexpr int64_t kNoEnd = SlotIndex::kNoEnd;

TEST(SlotIndex, VouchesForNothingUntilAScanReadAStretch) {
  SlotIndex index;
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{0, kNoEnd}));
  EXPECT_EQ(index.NextStretch(1, 500), (Stretch{500, kNoEnd}));
}

TEST(SlotIndex, ANamespaceNeedsItsRunsAndEverythingPastTheStretch) {
  SlotIndex index;
  // Namespace 1 at 100..102 and 500; namespace 2 everywhere else that was written.
  index.Record(0, 1000, {{1, 100}, {1, 101}, {1, 102}, {2, 300}, {1, 500}, {2, 900}}, 0, 0);
  EXPECT_EQ(index.runs(), 4u);
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{100, 103}));
  EXPECT_EQ(index.NextStretch(1, 101), (Stretch{101, 103}));
  EXPECT_EQ(index.NextStretch(1, 103), (Stretch{500, 501}));
  EXPECT_EQ(index.NextStretch(1, 501), (Stretch{1000, kNoEnd})) << "nothing more until 1000";
  EXPECT_EQ(index.NextStretch(3, 0), (Stretch{1000, kNoEnd})) << "a namespace never seen";
  EXPECT_EQ(index.NextStretch(3, 1000), (Stretch{1000, kNoEnd})) << "past the stretch";
  EXPECT_EQ(index.NextStretch(3, 1500), (Stretch{1500, kNoEnd}));
}

TEST(SlotIndex, NearbyRecordsShareARun) {
  SlotIndex index;
  index.Record(0, 100, {{1, 10}, {1, 10 + SlotIndex::kJoinGap}, {1, 60}}, 0, 0);
  EXPECT_EQ(index.runs(), 2u);
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{10, 11 + SlotIndex::kJoinGap}));
  // Seen again, out of order (a scan that went back): nothing changes, or runs merge.
  index.Record(0, 100, {{1, 60}, {1, 10}, {1, 40}, {1, 50}}, 0, 0);
  EXPECT_EQ(index.runs(), 1u);
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{10, 61}));
}

TEST(SlotIndex, StretchesThatMeetJoinAndOnesApartAreKeptApart) {
  SlotIndex index;
  index.Record(100, 200, {{1, 150}}, 0, 0);
  index.Record(200, 300, {{1, 250}}, 0, 0);
  index.Record(50, 100, {{2, 60}}, 0, 0);
  EXPECT_EQ(index.stretches(), (std::vector<SlotIndex::Covered>{{50, 300}}));
  EXPECT_EQ(index.NextStretch(2, 50), (Stretch{60, 61}));
  EXPECT_EQ(index.NextStretch(2, 61), (Stretch{300, kNoEnd}));
  // Apart (a follower at the tail, a replay behind it): nobody read what lies between.
  index.Record(0, 10, {{1, 5}}, 0, 0);
  index.Record(400, 500, {{1, 450}}, 0, 0);
  EXPECT_EQ(index.stretches(), (std::vector<SlotIndex::Covered>{{0, 10}, {50, 300}, {400, 500}}));
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{5, 6}));
  EXPECT_EQ(index.NextStretch(1, 6), (Stretch{10, kNoEnd}));
  EXPECT_EQ(index.NextStretch(1, 20), (Stretch{20, 50})) << "unknown until the next stretch";
  EXPECT_EQ(index.NextStretch(1, 260), (Stretch{300, kNoEnd}));
  EXPECT_EQ(index.NextStretch(1, 400), (Stretch{450, 451}));
  // The gap filled: one stretch.
  index.Record(300, 400, {}, 0, 0);
  index.Record(10, 50, {}, 0, 0);
  EXPECT_EQ(index.stretches(), (std::vector<SlotIndex::Covered>{{0, 500}}));
  EXPECT_EQ(index.NextStretch(1, 260), (Stretch{450, 451}));
}

TEST(SlotIndex, KeepsTheLongestStretchesApartAndTheOneBeingExtended) {
  SlotIndex index;
  for (int64_t i = 1; i <= static_cast<int64_t>(SlotIndex::kMaxStretches); ++i) {
    index.Record(i * 1000, i * 1000 + 100 + i, {}, 0, 0);
  }
  // A new scan's first piece is the shortest, but it is kept: the scan goes on extending it.
  index.Record(50000, 50010, {}, 0, 0);
  auto stretches = index.stretches();
  ASSERT_EQ(stretches.size(), SlotIndex::kMaxStretches);
  EXPECT_EQ(stretches.front().from, 2000) << "the shortest other went";
  EXPECT_EQ(stretches.back().from, 50000);
  index.Record(50010, 50020, {}, 0, 0);
  EXPECT_EQ(index.stretches().back().to, 50020);
}

TEST(SlotIndex, ALogThatWentBackDropsEverything) {
  SlotIndex index;
  index.Record(0, 100, {{1, 10}}, 0, 0);
  EXPECT_EQ(index.covered_end(), 100);
  index.LogWentBack();
  EXPECT_EQ(index.covered_end(), 0);
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{0, kNoEnd}));
  EXPECT_EQ(index.runs(), 0u);
}

TEST(SlotIndex, ATopicMadeAgainDropsTheIndexOfTheOldOne) {
  SlotIndex index;
  const TopicId old_topic{1, 2}, new_topic{1, 3};
  index.OnLog(old_topic);
  index.Record(0, 100, {{1, 10}}, 0, index.log_changes());
  index.OnLog(old_topic);
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{10, 11})) << "the same topic: the index holds";
  index.OnLog(new_topic);
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{0, kNoEnd}));
  EXPECT_EQ(index.runs(), 0u);
}

TEST(SlotIndex, AScanThatBeganOnTheOldLogRecordsNothing) {
  SlotIndex index;
  index.OnLog(TopicId{1, 2});
  const uint64_t began = index.log_changes();
  index.OnLog(TopicId{1, 3});
  index.Record(0, 100, {{1, 10}}, 0, began);
  EXPECT_TRUE(index.stretches().empty()) << "what it read may be of the old log";
  index.LogWentBack();
  index.Record(0, 100, {{1, 10}}, 0, began + 1);
  EXPECT_TRUE(index.stretches().empty()) << "nor after the end went back";
  index.Record(0, 100, {{1, 10}}, 0, index.log_changes());
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{10, 11}));
}

TEST(SlotIndex, RecordsGoneFromKafkaAreNoLongerVouchedFor) {
  SlotIndex index;
  index.Record(0, 100, {{1, 10}, {1, 50}, {2, 70}}, 0, 0);
  index.ForgetBelow(40);
  EXPECT_EQ(index.NextStretch(1, 0), (Stretch{0, 40})) << "below what Kafka holds: read through";
  EXPECT_EQ(index.NextStretch(1, 40), (Stretch{50, 51}));
  EXPECT_EQ(index.runs(), 2u);
  index.ForgetBelow(200);
  EXPECT_EQ(index.NextStretch(2, 70), (Stretch{70, kNoEnd}));
  EXPECT_EQ(index.runs(), 0u);
  EXPECT_TRUE(index.stretches().empty());
}

TEST(SlotIndex, KnowsAboutHowManyRecordsHoldSoManyBytes) {
  SlotIndex index;
  EXPECT_EQ(index.OffsetsHolding(1000), 1000) << "nothing read yet: at most a byte a record";
  index.Record(0, 100, {}, 100 * 500, 0);
  index.Record(100, 200, {}, 100 * 1500, 0);
  EXPECT_EQ(index.OffsetsHolding(1 << 20), (1 << 20) / 1000);
}

TEST(SlotIndex, TooManyRunsDropTheIndexRatherThanGrowWithoutBound) {
  SlotIndex index;
  std::vector<SlotIndex::Seen> seen;
  const int64_t n = static_cast<int64_t>(SlotIndex::kMaxRuns) + 1;
  for (int64_t i = 0; i < n; ++i) seen.push_back({static_cast<uint64_t>(i), i});
  index.Record(0, n, seen, 0, 0);
  EXPECT_EQ(index.runs(), 0u);
  EXPECT_EQ(index.NextStretch(7, 0), (Stretch{0, kNoEnd}));
  // The next scan starts it again where the last one ended.
  index.Record(n, n + 10, {{7, n + 5}}, 0, 0);
  EXPECT_EQ(index.NextStretch(7, n), (Stretch{n + 5, n + 6}));
}

}  // namespace
}  // namespace wal
