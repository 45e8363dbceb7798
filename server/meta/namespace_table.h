// The namespace table: which slot each namespace lives in and how far it is truncated. It is a
// pure function of the records of the metadata topic, applied in offset order, so every server
// that has read the same prefix of that topic holds the same table. Not thread-safe: MetaStore
// guards it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/common/slot.h"
#include "wal/meta/v1/meta.pb.h"

namespace wal {

// A fence record in a slot: the namespace's records of a lower epoch after it are ignored.
struct Fence {
  uint64_t epoch = 0;
  int64_t offset = 0;
  bool operator==(const Fence& o) const { return epoch == o.epoch && offset == o.offset; }
};

struct NamespaceState {
  uint64_t namespace_id = 0;
  Slot slot;
  int64_t start_offset = 0;      // slot end when created: no entry of it lies below
  int64_t truncated_before = 0;  // entries below are truncated
  bool deleted = false;
  // Offset of the meta record that established this assignment in this server's table: it
  // tells one incarnation of the namespace from the next (reads are bound to theirs). Not the
  // same on every server: after compaction a later record may be the first one a server reads.
  int64_t meta_offset = -1;
  uint64_t epoch = 0;              // current writer epoch; 0 until the first AcquireNamespace
  int64_t epoch_meta_offset = -1;  // offset of the meta record that raised the epoch to `epoch`
  // Fences in offset order: those at or after truncated_before and the last one before it.
  std::vector<Fence> fences;

  // Lowest readable entry id.
  int64_t first_entry_id() const { return std::max(start_offset, truncated_before); }
  // The highest epoch fenced before `offset`: a read starting there ignores lower epochs.
  uint64_t FencedEpochBefore(int64_t offset) const {
    uint64_t e = 0;
    for (const Fence& f : fences) {
      if (f.offset < offset) e = std::max(e, f.epoch);
    }
    return e;
  }
  bool SameAssignment(const meta::v1::NamespaceRecord& r) const {
    return slot.topic == r.topic() && slot.partition == r.partition() &&
           start_offset == r.start_offset();
  }
};

// Where an append to a namespace goes and the epoch it must carry at least.
struct AppendRoute {
  Slot slot;
  uint64_t epoch = 0;
};

enum class ApplyOutcome {
  kCreated,   // a new assignment (a CREATE, or any record of a namespace not seen before)
  kUpdated,   // truncation or epoch raised, fence added, or namespace deleted
  kIgnored,   // no change: a duplicate, or a stale record of an earlier assignment
  kLostRace,  // a CREATE for a namespace that already had a live assignment
  // A change (truncation, acquisition, fence, restatement) of a deleted namespace, written from
  // a view that had not seen the deletion: ignored, but it is now the key's latest record, and
  // once compaction drops the DELETE before it, it would bring the namespace back. Also a
  // deletion written from a view that missed an acquisition: compaction would keep its lower
  // epoch. Either way the deletion must be restated with the namespace's whole state.
  kStaleAfterDelete,
};

class NamespaceTable {
 public:
  // `slots` are the slots this server allocates from, in allocation order.
  explicit NamespaceTable(std::vector<Slot> slots);

  ApplyOutcome Apply(uint64_t namespace_id, const meta::v1::NamespaceRecord& record,
                     int64_t meta_offset);

  // The live (not deleted) namespace, if any.
  std::optional<NamespaceState> Get(uint64_t namespace_id) const;
  // The truncation point alone (no copy of the fence list) of the incarnation established at
  // `incarnation` (its meta_offset); nullopt once that one is deleted, also when the namespace
  // was created again since.
  std::optional<int64_t> TruncatedBefore(uint64_t namespace_id, int64_t incarnation) const;
  // The last epoch of a deleted namespace (0 if it is live or unknown): a new incarnation starts
  // above it (StartAbove).
  uint64_t EarlierEpoch(uint64_t namespace_id) const;
  // Just what an append needs (no copy of the fence list); nullopt like Get.
  std::optional<AppendRoute> Route(uint64_t namespace_id) const;
  // Live namespaces with id > `after`, in id order, at most `limit`.
  std::vector<NamespaceState> List(uint64_t after, size_t limit) const;
  // Live namespaces of `slot`, in id order.
  std::vector<NamespaceState> InSlot(const Slot& slot) const;
  // Per slot with live namespaces (any slot, not only ours): their lowest first_entry_id.
  std::map<Slot, int64_t> LowestFirstEntryIds() const;
  // Live namespaces per slot, in the order of the constructor's slots.
  std::vector<size_t> LoadPerSlot() const;
  // The slot with the fewest live namespaces; the first such slot on a tie, so that servers
  // with the same table choose alike.
  const Slot& LeastLoadedSlot() const;
  // Live namespaces whose latest meta record is not their current assignment (a lost CREATE
  // race or a stale record came last). Log compaction keeps only the latest record of a key, so
  // these need their assignment restated.
  std::vector<NamespaceState> NeedingRestate() const;
  // Whether the latest record of a live namespace falls short of its state (see NeedingRestate).
  bool LatestRecordStale(uint64_t namespace_id) const;
  // A deleted namespace whose latest record is not a deletion (kStaleAfterDelete), with its
  // last state, so that the deletion can be restated after that record.
  std::optional<NamespaceState> DeletedButStale(uint64_t namespace_id) const;
  size_t live_count() const { return live_; }
  const std::vector<Slot>& slots() const { return slots_; }

 private:
  struct Row {
    NamespaceState state;
    bool latest_record_stale = false;
  };
  void Establish(Row& row, uint64_t id, const meta::v1::NamespaceRecord& r, int64_t meta_offset);
  void CountLoad(const NamespaceState& state, int delta);

  std::vector<Slot> slots_;
  std::map<Slot, size_t> slot_index_;
  std::vector<size_t> load_;
  std::map<uint64_t, Row> rows_;
  size_t live_ = 0;
};

// Starts the new incarnation `state` of a namespace above the epochs of its earlier ones (the
// last was `earlier_epoch`): at the next epoch, fenced from its start, so that a writer of an
// earlier incarnation is refused for ever and what it still gets into the slot is ignored. A
// namespace never acquired (earlier_epoch 0) starts at epoch 0, as a new one.
void StartAbove(uint64_t earlier_epoch, NamespaceState* state);

// Builds a meta record carrying the full state of `state`, so that any single record of a key is
// enough to rebuild the namespace after compaction.
meta::v1::NamespaceRecord MakeRecord(meta::v1::NamespaceRecord::Kind kind,
                                     const NamespaceState& state, const std::string& writer);

}  // namespace wal
