#include "server/meta/namespace_table.h"

#include <gtest/gtest.h>

namespace wal {
namespace {

using meta::v1::NamespaceRecord;

std::vector<Slot> ThreeSlots() { return {{"w_0", 0}, {"w_0", 1}, {"w_1", 0}}; }

NamespaceRecord Record(NamespaceRecord::Kind kind, const Slot& slot, int64_t start,
                       int64_t truncated = 0) {
  NamespaceState s;
  s.slot = slot;
  s.start_offset = start;
  s.truncated_before = truncated;
  s.deleted = kind == NamespaceRecord::DELETE;
  return MakeRecord(kind, s, "test");
}

TEST(NamespaceTable, LeastLoadedSlotSpreadsNamespaces) {
  NamespaceTable table(ThreeSlots());
  for (uint64_t id = 1; id <= 9; ++id) {
    const Slot slot = table.LeastLoadedSlot();
    EXPECT_EQ(table.Apply(id, Record(NamespaceRecord::CREATE, slot, 0), id),
              ApplyOutcome::kCreated);
  }
  EXPECT_EQ(table.LoadPerSlot(), (std::vector<size_t>{3, 3, 3}));
  // Ties go to the first slot, so servers with the same table choose alike.
  EXPECT_EQ(table.LeastLoadedSlot(), (Slot{"w_0", 0}));
  // Round robin put namespace 5 in the second slot; deleting it makes that slot the lightest.
  ASSERT_EQ(table.Get(5)->slot, (Slot{"w_0", 1}));
  table.Apply(5, Record(NamespaceRecord::DELETE, table.Get(5)->slot, 0), 20);
  EXPECT_EQ(table.LeastLoadedSlot(), (Slot{"w_0", 1}));
}

TEST(NamespaceTable, FirstCreateWins) {
  NamespaceTable table(ThreeSlots());
  EXPECT_EQ(table.Apply(7, Record(NamespaceRecord::CREATE, {"w_0", 0}, 10), 1),
            ApplyOutcome::kCreated);
  EXPECT_EQ(table.Apply(7, Record(NamespaceRecord::CREATE, {"w_1", 0}, 20), 2),
            ApplyOutcome::kLostRace);
  auto ns = table.Get(7);
  ASSERT_TRUE(ns);
  EXPECT_EQ(ns->slot, (Slot{"w_0", 0}));
  EXPECT_EQ(ns->start_offset, 10);
  EXPECT_EQ(ns->meta_offset, 1);
  // The loser's record came last: compaction would keep it, so the winner needs restating.
  ASSERT_EQ(table.NeedingRestate().size(), 1u);
  table.Apply(7, Record(NamespaceRecord::RESTATE, {"w_0", 0}, 10), 3);
  EXPECT_TRUE(table.NeedingRestate().empty());
  EXPECT_EQ(table.LoadPerSlot(), (std::vector<size_t>{1, 0, 0}));
}

TEST(NamespaceTable, TruncationOnlyRises) {
  NamespaceTable table(ThreeSlots());
  table.Apply(1, Record(NamespaceRecord::CREATE, {"w_0", 1}, 5), 0);
  EXPECT_EQ(table.Get(1)->first_entry_id(), 5);
  EXPECT_EQ(table.Apply(1, Record(NamespaceRecord::TRUNCATE, {"w_0", 1}, 5, 50), 1),
            ApplyOutcome::kUpdated);
  EXPECT_EQ(table.Apply(1, Record(NamespaceRecord::TRUNCATE, {"w_0", 1}, 5, 30), 2),
            ApplyOutcome::kIgnored);
  EXPECT_EQ(table.Get(1)->truncated_before, 50);
  EXPECT_EQ(table.Get(1)->first_entry_id(), 50);
}

TEST(NamespaceTable, RecordsOfAnotherAssignmentAreIgnored) {
  NamespaceTable table(ThreeSlots());
  table.Apply(1, Record(NamespaceRecord::CREATE, {"w_0", 1}, 5), 0);
  EXPECT_EQ(table.Apply(1, Record(NamespaceRecord::TRUNCATE, {"w_1", 0}, 5, 99), 1),
            ApplyOutcome::kIgnored);
  EXPECT_EQ(table.Apply(1, Record(NamespaceRecord::DELETE, {"w_0", 1}, 6), 2),
            ApplyOutcome::kIgnored);
  EXPECT_TRUE(table.Get(1));
  EXPECT_EQ(table.Get(1)->truncated_before, 0);
}

TEST(NamespaceTable, DeleteThenCreateAgain) {
  NamespaceTable table(ThreeSlots());
  table.Apply(1, Record(NamespaceRecord::CREATE, {"w_0", 0}, 5), 0);
  EXPECT_EQ(table.Apply(1, Record(NamespaceRecord::DELETE, {"w_0", 0}, 5), 1),
            ApplyOutcome::kUpdated);
  EXPECT_FALSE(table.Get(1));
  EXPECT_EQ(table.live_count(), 0u);
  // A late truncate of the deleted assignment does not bring it back (it is reported, so that
  // the deletion can be restated after it).
  EXPECT_EQ(table.Apply(1, Record(NamespaceRecord::TRUNCATE, {"w_0", 0}, 5, 9), 2),
            ApplyOutcome::kStaleAfterDelete);
  EXPECT_FALSE(table.Get(1));
  EXPECT_EQ(table.Apply(1, Record(NamespaceRecord::CREATE, {"w_1", 0}, 70), 3),
            ApplyOutcome::kCreated);
  EXPECT_EQ(table.Get(1)->slot, (Slot{"w_1", 0}));
  EXPECT_EQ(table.Get(1)->first_entry_id(), 70);
}

TEST(NamespaceTable, CompactedHistoryStillRebuildsTheTable) {
  // After compaction only the latest record of a key is left; it carries the whole state.
  NamespaceTable table(ThreeSlots());
  EXPECT_EQ(table.Apply(3, Record(NamespaceRecord::TRUNCATE, {"w_0", 1}, 5, 42), 900),
            ApplyOutcome::kCreated);
  EXPECT_EQ(table.Get(3)->first_entry_id(), 42);
  EXPECT_EQ(table.Apply(4, Record(NamespaceRecord::DELETE, {"w_0", 1}, 5), 901),
            ApplyOutcome::kCreated);
  EXPECT_FALSE(table.Get(4));
  EXPECT_EQ(table.LoadPerSlot(), (std::vector<size_t>{0, 1, 0}));
}

TEST(NamespaceTable, ListPagesInIdOrderSkippingDeleted) {
  NamespaceTable table(ThreeSlots());
  for (uint64_t id : {5, 1, 9, 3})
    table.Apply(id, Record(NamespaceRecord::CREATE, {"w_0", 0}, 0), id);
  table.Apply(3, Record(NamespaceRecord::DELETE, {"w_0", 0}, 0), 10);
  auto page = table.List(0, 2);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].namespace_id, 1u);
  EXPECT_EQ(page[1].namespace_id, 5u);
  page = table.List(5, 10);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].namespace_id, 9u);
}

TEST(NamespaceTable, SlotOutsideOurListIsKeptButNotCounted) {
  NamespaceTable table(ThreeSlots());
  table.Apply(1, Record(NamespaceRecord::CREATE, {"w_7", 3}, 0), 0);
  ASSERT_TRUE(table.Get(1));
  EXPECT_EQ(table.LoadPerSlot(), (std::vector<size_t>{0, 0, 0}));
}

NamespaceRecord WithEpoch(NamespaceRecord r, uint64_t epoch, std::vector<Fence> fences = {}) {
  r.set_epoch(epoch);
  for (const Fence& f : fences) {
    auto* out = r.add_fences();
    out->set_epoch(f.epoch);
    out->set_offset(f.offset);
  }
  return r;
}

TEST(NamespaceTable, FirstRecordRaisingTheEpochWins) {
  NamespaceTable table(ThreeSlots());
  const Slot slot{"w_0", 0};
  table.Apply(1, Record(NamespaceRecord::CREATE, slot, 10), 1);
  EXPECT_EQ(table.Apply(1, WithEpoch(Record(NamespaceRecord::ACQUIRE, slot, 10), 1), 2),
            ApplyOutcome::kUpdated);
  // A second acquirer proposed epoch 1 too: it lost.
  EXPECT_EQ(table.Apply(1, WithEpoch(Record(NamespaceRecord::ACQUIRE, slot, 10), 1), 3),
            ApplyOutcome::kIgnored);
  EXPECT_EQ(table.Get(1)->epoch, 1u);
  EXPECT_EQ(table.Get(1)->epoch_meta_offset, 2);
  // Records written from a stale view never lower the epoch.
  table.Apply(1, Record(NamespaceRecord::TRUNCATE, slot, 10, 50), 4);
  EXPECT_EQ(table.Get(1)->epoch, 1u);
  EXPECT_EQ(table.Get(1)->truncated_before, 50);
}

TEST(NamespaceTable, StaleLatestRecordIsNoticed) {
  NamespaceTable table(ThreeSlots());
  const Slot slot{"w_0", 0};
  table.Apply(1, Record(NamespaceRecord::CREATE, slot, 10), 1);
  table.Apply(1, WithEpoch(Record(NamespaceRecord::ACQUIRE, slot, 10), 1), 2);
  EXPECT_FALSE(table.LatestRecordStale(1));
  // A truncation by a server that had not seen epoch 1: compaction would keep epoch 0.
  table.Apply(1, Record(NamespaceRecord::TRUNCATE, slot, 10, 20), 3);
  EXPECT_TRUE(table.LatestRecordStale(1));
  EXPECT_EQ(table.NeedingRestate().size(), 1u);
  table.Apply(1, MakeRecord(NamespaceRecord::RESTATE, *table.Get(1), "test"), 4);
  EXPECT_FALSE(table.LatestRecordStale(1));
  // The restated record alone rebuilds the same state (what compaction leaves).
  NamespaceTable compacted(ThreeSlots());
  compacted.Apply(1, MakeRecord(NamespaceRecord::RESTATE, *table.Get(1), "test"), 4);
  EXPECT_EQ(compacted.Get(1)->epoch, 1u);
  EXPECT_EQ(compacted.Get(1)->truncated_before, 20);
}

TEST(NamespaceTable, FencesMergeAndOnlyTheLastBelowTruncationIsKept) {
  NamespaceTable table(ThreeSlots());
  const Slot slot{"w_0", 0};
  table.Apply(1, Record(NamespaceRecord::CREATE, slot, 10), 1);
  table.Apply(1, WithEpoch(Record(NamespaceRecord::FENCE, slot, 10), 1, {{1, 100}}), 2);
  table.Apply(1, WithEpoch(Record(NamespaceRecord::FENCE, slot, 10), 2, {{1, 100}, {2, 200}}), 3);
  // A record that knows only the first fence adds nothing and takes nothing away.
  table.Apply(1, WithEpoch(Record(NamespaceRecord::FENCE, slot, 10), 1, {{1, 100}}), 4);
  table.Apply(1, WithEpoch(Record(NamespaceRecord::FENCE, slot, 10), 3, {{3, 300}}), 5);
  auto state = table.Get(1);
  ASSERT_EQ(state->fences.size(), 3u);
  EXPECT_EQ(state->epoch, 3u);
  EXPECT_EQ(state->FencedEpochBefore(100), 0u);
  EXPECT_EQ(state->FencedEpochBefore(101), 1u);
  EXPECT_EQ(state->FencedEpochBefore(250), 2u);
  EXPECT_EQ(state->FencedEpochBefore(1000), 3u);
  table.Apply(1, WithEpoch(Record(NamespaceRecord::TRUNCATE, slot, 10, 250), 3), 6);
  state = table.Get(1);
  ASSERT_EQ(state->fences.size(), 2u);
  EXPECT_EQ(state->fences[0], (Fence{2, 200}));
  EXPECT_EQ(state->FencedEpochBefore(250), 2u);
}

// Fences whose records land out of epoch order (acquisitions through two servers): after a
// truncation past both, a read starting there must still ignore the epochs below the highest.
TEST(NamespaceTable, TruncationKeepsTheHighestEpochFencedBeforeIt) {
  NamespaceTable table(ThreeSlots());
  table.Apply(1, Record(NamespaceRecord::CREATE, {"w_0", 0}, 0), 0);
  NamespaceState state = *table.Get(1);
  state.epoch = 3;
  state.fences = {Fence{3, 10}};
  table.Apply(1, MakeRecord(NamespaceRecord::FENCE, state, "a"), 1);
  state.fences = {Fence{2, 20}};  // epoch 2's fence, written later by a server behind
  table.Apply(1, MakeRecord(NamespaceRecord::FENCE, state, "b"), 2);
  EXPECT_EQ(table.Get(1)->FencedEpochBefore(30), 3u);
  table.Apply(1, Record(NamespaceRecord::TRUNCATE, {"w_0", 0}, 0, 30), 3);
  EXPECT_EQ(table.Get(1)->FencedEpochBefore(30), 3u);
}

TEST(NamespaceTable, AChangeAfterADeleteIsStaleUntilTheDeletionIsRestated) {
  NamespaceTable table(ThreeSlots());
  table.Apply(1, Record(NamespaceRecord::CREATE, {"w_0", 0}, 10), 1);
  table.Apply(1, Record(NamespaceRecord::DELETE, {"w_0", 0}, 10), 2);
  EXPECT_FALSE(table.DeletedButStale(1).has_value());
  EXPECT_EQ(table.Apply(1, Record(NamespaceRecord::TRUNCATE, {"w_0", 0}, 10, 20), 3),
            ApplyOutcome::kStaleAfterDelete);
  EXPECT_FALSE(table.Get(1).has_value()) << "still deleted";
  ASSERT_TRUE(table.DeletedButStale(1).has_value());
  EXPECT_EQ(table.DeletedButStale(1)->start_offset, 10);
  table.Apply(1, Record(NamespaceRecord::DELETE, {"w_0", 0}, 10), 4);
  EXPECT_FALSE(table.DeletedButStale(1).has_value());
  EXPECT_FALSE(table.Get(1).has_value());
}

TEST(NamespaceTable, ARestatedDeletionNeverDeletesTheNamespaceCreatedAgain) {
  NamespaceTable table(ThreeSlots());
  table.Apply(1, Record(NamespaceRecord::CREATE, {"w_0", 0}, 10), 1);
  table.Apply(1, Record(NamespaceRecord::DELETE, {"w_0", 0}, 10), 2);
  table.Apply(1, Record(NamespaceRecord::TRUNCATE, {"w_0", 0}, 10, 12), 3);  // stale view
  // Created again, in the same slot at the same start (nothing was written there since).
  ASSERT_EQ(table.Apply(1, Record(NamespaceRecord::CREATE, {"w_0", 0}, 10), 4),
            ApplyOutcome::kCreated);
  // The deletion restated for the first incarnation lands after that.
  NamespaceRecord restated = Record(NamespaceRecord::DELETE, {"w_0", 0}, 10);
  restated.set_incarnation(1);
  EXPECT_EQ(table.Apply(1, restated, 5), ApplyOutcome::kIgnored);
  EXPECT_TRUE(table.Get(1).has_value()) << "the namespace created again was deleted";
  EXPECT_TRUE(table.LatestRecordStale(1)) << "its assignment must be restated after it";
}

TEST(NamespaceTable, ANamespaceCreatedAgainGoesOnAboveTheEpochsOfItsEarlierIncarnations) {
  NamespaceTable table(ThreeSlots());
  const Slot slot{"w_0", 0};
  table.Apply(1, Record(NamespaceRecord::CREATE, slot, 10), 1);
  table.Apply(1, WithEpoch(Record(NamespaceRecord::ACQUIRE, slot, 10), 1), 2);
  table.Apply(1, WithEpoch(Record(NamespaceRecord::ACQUIRE, slot, 10), 2), 3);
  const NamespaceTable before_deletion = table;
  table.Apply(1, WithEpoch(Record(NamespaceRecord::DELETE, slot, 10), 2), 4);
  EXPECT_EQ(table.EarlierEpoch(1), 2u);
  EXPECT_EQ(before_deletion.EarlierEpoch(1), 0u) << "live: no earlier incarnation to go above";

  // Created again by a server that knew epoch 2: its record starts the new incarnation at 3,
  // fenced from its start, so that nothing a writer of epoch 2 still gets into the slot counts.
  NamespaceState proposal;
  proposal.slot = slot;
  proposal.start_offset = 30;
  StartAbove(table.EarlierEpoch(1), &proposal);
  NamespaceTable knowing = table;
  ASSERT_EQ(knowing.Apply(1, MakeRecord(NamespaceRecord::CREATE, proposal, "test"), 5),
            ApplyOutcome::kCreated);
  EXPECT_EQ(knowing.Get(1)->epoch, 3u);
  EXPECT_EQ(knowing.Get(1)->FencedEpochBefore(30), 3u);
  EXPECT_FALSE(knowing.LatestRecordStale(1));

  // Created again by a server that had not read the acquisitions (its record says epoch 0):
  // every server still starts the new incarnation at 3, and the record is restated, since
  // compaction may leave only it.
  ASSERT_EQ(table.Apply(1, Record(NamespaceRecord::CREATE, slot, 30), 5), ApplyOutcome::kCreated);
  EXPECT_EQ(table.Get(1)->epoch, 3u);
  EXPECT_EQ(table.Get(1)->FencedEpochBefore(30), 3u);
  EXPECT_TRUE(table.LatestRecordStale(1));
  NamespaceTable compacted(ThreeSlots());
  compacted.Apply(1, MakeRecord(NamespaceRecord::RESTATE, *table.Get(1), "test"), 6);
  EXPECT_EQ(compacted.Get(1)->epoch, 3u);
  EXPECT_EQ(compacted.Get(1)->FencedEpochBefore(30), 3u);

  // A namespace never acquired comes back at epoch 0, as a new one.
  table.Apply(2, Record(NamespaceRecord::CREATE, slot, 10), 7);
  table.Apply(2, Record(NamespaceRecord::DELETE, slot, 10), 8);
  table.Apply(2, Record(NamespaceRecord::CREATE, slot, 40), 9);
  EXPECT_EQ(table.Get(2)->epoch, 0u);
  EXPECT_TRUE(table.Get(2)->fences.empty());
}

TEST(NamespaceTable, AReadBoundToAnIncarnationSeesItGoneWhenTheNamespaceIsCreatedAgain) {
  NamespaceTable table(ThreeSlots());
  const Slot slot{"w_0", 0};
  table.Apply(1, Record(NamespaceRecord::CREATE, slot, 10), 1);
  const int64_t first = table.Get(1)->meta_offset;
  table.Apply(1, Record(NamespaceRecord::TRUNCATE, slot, 10, 12), 2);
  EXPECT_EQ(table.TruncatedBefore(1, first), 12) << "a change is not a new incarnation";
  // Deleted and created again in the same slot at the same start, both applied before the
  // read looks again.
  table.Apply(1, Record(NamespaceRecord::DELETE, slot, 10), 3);
  table.Apply(1, Record(NamespaceRecord::CREATE, slot, 10), 4);
  EXPECT_FALSE(table.TruncatedBefore(1, first).has_value());
  EXPECT_EQ(table.TruncatedBefore(1, table.Get(1)->meta_offset), 0);
}

TEST(NamespaceTable, ADeletionFromAViewThatMissedAnAcquisitionIsRestated) {
  NamespaceTable table(ThreeSlots());
  const Slot slot{"w_0", 0};
  table.Apply(1, Record(NamespaceRecord::CREATE, slot, 10), 1);
  table.Apply(1, WithEpoch(Record(NamespaceRecord::ACQUIRE, slot, 10), 1), 2);
  table.Apply(1, WithEpoch(Record(NamespaceRecord::ACQUIRE, slot, 10), 2), 3);
  // Written by a server that had not read epoch 2: deleted all the same, but compaction would
  // keep epoch 1, and a later incarnation would start at 2, which a fenced writer still holds.
  EXPECT_EQ(table.Apply(1, WithEpoch(Record(NamespaceRecord::DELETE, slot, 10), 1), 4),
            ApplyOutcome::kStaleAfterDelete);
  EXPECT_FALSE(table.Get(1).has_value());
  EXPECT_EQ(table.EarlierEpoch(1), 2u);
  ASSERT_TRUE(table.DeletedButStale(1).has_value());
  NamespaceRecord restated = MakeRecord(NamespaceRecord::DELETE, *table.DeletedButStale(1), "test");
  restated.set_incarnation(table.DeletedButStale(1)->meta_offset);
  EXPECT_EQ(table.Apply(1, restated, 5), ApplyOutcome::kIgnored);
  EXPECT_FALSE(table.DeletedButStale(1).has_value());
  NamespaceTable compacted(ThreeSlots());
  compacted.Apply(1, restated, 5);
  EXPECT_EQ(compacted.EarlierEpoch(1), 2u);

  // The same stale deletion landing after an up-to-date one.
  NamespaceTable second(ThreeSlots());
  second.Apply(1, Record(NamespaceRecord::CREATE, slot, 10), 1);
  second.Apply(1, WithEpoch(Record(NamespaceRecord::ACQUIRE, slot, 10), 2), 2);
  EXPECT_EQ(second.Apply(1, WithEpoch(Record(NamespaceRecord::DELETE, slot, 10), 2), 3),
            ApplyOutcome::kUpdated);
  EXPECT_EQ(second.Apply(1, WithEpoch(Record(NamespaceRecord::DELETE, slot, 10), 1), 4),
            ApplyOutcome::kStaleAfterDelete);
  EXPECT_EQ(second.EarlierEpoch(1), 2u);
  EXPECT_TRUE(second.DeletedButStale(1).has_value());
}

}  // namespace
}  // namespace wal
