#include "server/common/seen_sequences.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

namespace wal {
namespace {

TEST(SeenSequences, EachPairIsNewOnceWhateverTheOrder) {
  std::vector<uint64_t> order;
  for (uint64_t s = 1; s <= 200; ++s) order.push_back(s);
  std::mt19937 rng(5);
  for (int round = 0; round < 20; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    SeenSequences seen;
    std::set<uint64_t> model;
    for (uint64_t s : order) {
      // Out of order, with repeats of what came before and of the neighbours to come.
      const uint64_t again = order[rng() % order.size()];
      EXPECT_EQ(seen.Add(7, s), model.insert(s).second) << s;
      EXPECT_EQ(seen.Add(7, again), model.insert(again).second) << again;
      EXPECT_TRUE(seen.Contains(7, s));
      EXPECT_FALSE(seen.Contains(8, s)) << "another writer";
    }
    for (uint64_t s = 1; s <= 200; ++s) EXPECT_FALSE(seen.Add(7, s)) << s;
    EXPECT_FALSE(seen.Contains(7, 201));
  }
}

TEST(SeenSequences, APairWithoutWriterOrSequenceNamesNoEntry) {
  SeenSequences seen;
  EXPECT_TRUE(seen.Add(0, 1));
  EXPECT_TRUE(seen.Add(0, 1));
  EXPECT_TRUE(seen.Add(3, 0));
  EXPECT_TRUE(seen.Add(3, 0));
  EXPECT_FALSE(seen.Contains(0, 1));
  EXPECT_FALSE(seen.Contains(3, 0));
  EXPECT_TRUE(seen.Add(3, UINT64_MAX));
  EXPECT_FALSE(seen.Add(3, UINT64_MAX));
  EXPECT_TRUE(seen.Add(3, UINT64_MAX - 1));
}

}  // namespace
}  // namespace wal
