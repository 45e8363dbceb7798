// Where each namespace's records lie in one slot, over the stretch of offsets that this
// walserver's scans have read whole: a scan skips what none of its reads' namespaces has
// records in (SlotScan::SkipAhead), so a small namespace behind much of another's data costs
// its own records, not the slot's.
//
// Why a read never misses a record: the index vouches only for stretches [from, to) that scans
// read every record of (SlotIndex::Record). Records in Kafka never move and nobody writes below
// a partition's end, so a record of a namespace in such a stretch is one a scan saw and put in
// the namespace's runs. Outside them (before the first scan, past their ends, below what Kafka
// lost) nothing is vouched for and a scan reads every record. The index belongs to one log:
// each read tells it the topic's id (OnLog; not on the mock cluster, ReaderOptions::topic_ids),
// and a topic made again under the same name has another, which drops the index, as does a
// partition whose end is found below what the index covers (LogWentBack). A scan records only
// into the log it began on (log_changes). Not told apart: a Kafka without topic ids (id zero)
// whose topic was made again and grew past the index, and an unclean leader election (off
// unless an operator turns it on) that grew the log past the index again. The index is kept in
// Kafka too (log/slot_index_store.h): a walserver that starts again takes it from there, and
// each read checks its log as above before it trusts it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "server/common/slot.h"
#include "server/kafka/admin.h"

namespace wal {

class SlotIndex {
 public:
  // A namespace's records inside [first, last]; records of others may lie between them.
  struct Run {
    int64_t first;
    int64_t last;
  };
  // Offsets [from, to) that scans read whole.
  struct Covered {
    int64_t from;
    int64_t to;
  };
  // A record a scan saw.
  struct Seen {
    uint64_t namespace_id;
    int64_t offset;
  };
  // Where a read of a namespace must read from `from` on: [begin, end) may hold its records;
  // none lie in [from, begin). Where the index vouches for nothing, `end` is where it next
  // does (max() when nowhere).
  struct Stretch {
    int64_t begin;
    int64_t end;
  };
  static constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();

  // Records less than this many offsets apart go into one run: reading a few records of other
  // namespaces costs less than going to another offset (a fetch round trip).
  static constexpr int64_t kJoinGap = 16;
  // A slot's index holds at most this many runs (16 bytes each, plus the namespaces' vectors);
  // past it, it is dropped and starts again from the next scans.
  static constexpr size_t kMaxRuns = 1 << 16;
  // Stretches apart from each other (a follower at the tail while a replay fills in behind);
  // past this many, the shortest is forgotten.
  static constexpr size_t kMaxStretches = 8;

  // A scan read every record of [from, to), `bytes` in all; `seen` are those walserver wrote, in
  // any order. Joins the stretches it meets or touches. Ignored when the log changed since the
  // scan began (`log_changes`, log_changes() then): what it read may be of the old log.
  void Record(int64_t from, int64_t to, const std::vector<Seen>& seen, uint64_t bytes,
              uint64_t log_changes);
  // Records below `low` are gone from Kafka: no longer vouched for, so a read starting below
  // it meets the loss as it would without an index.
  void ForgetBelow(int64_t low);
  // Where the last stretch ends (0: none). A partition whose end is now below what this was
  // before went back (the topic made again, an unclean leader election): then LogWentBack.
  int64_t covered_end() const;
  // Drops everything: none of it can be trusted.
  void LogWentBack();
  // The topic's id as a read found it: when it is not the one the index was built under (the
  // topic was made again), LogWentBack. True when that dropped an index of another topic.
  bool OnLog(const TopicId& id);
  // How many times the log changed (LogWentBack); a scan passes what it was when it began to
  // Record.
  uint64_t log_changes() const;
  Stretch NextStretch(uint64_t namespace_id, int64_t from) const;
  // About how many offsets of the slot hold `bytes`, from the records scans read (one offset
  // per byte before any).
  int64_t OffsetsHolding(uint64_t bytes) const;

  // What the index holds, to keep in Kafka for a walserver that starts later on the same topics.
  struct Snapshot {
    TopicId log;
    std::vector<Covered> stretches;
    std::map<uint64_t, std::vector<Run>> runs;  // by namespace
    uint64_t bytes_recorded = 0;
    uint64_t offsets_recorded = 0;
  };
  // Nothing when the index vouches for nothing or has not learned its log's id (OnLog).
  std::optional<Snapshot> TakeSnapshot() const;
  // Takes `snapshot` when the index holds nothing yet and either is of the snapshot's log or
  // has not learned its log at all (then it is of the snapshot's until a read says otherwise:
  // every read checks the id before it trusts the index). True when taken. Meant for a
  // walserver's start, before any read; a scan running meanwhile records nothing into it.
  bool Restore(Snapshot snapshot);
  // Rises with every change of what the index holds, so that only a changed index is saved.
  uint64_t changes() const;

  // For tests.
  size_t runs() const;
  std::vector<Covered> stretches() const;

 private:
  void Add(uint64_t namespace_id, int64_t offset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Clear() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable std::mutex mu_;
  // Sorted, apart (not touching).
  std::vector<Covered> stretches_ ABSL_GUARDED_BY(mu_);
  // Sorted, apart by more than kJoinGap; each inside what a stretch covers or covered (a run
  // left by a forgotten stretch still holds only real records of its namespace).
  std::unordered_map<uint64_t, std::vector<Run>> runs_ ABSL_GUARDED_BY(mu_);
  size_t run_count_ ABSL_GUARDED_BY(mu_) = 0;
  TopicId log_ ABSL_GUARDED_BY(mu_);
  uint64_t log_changes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  // Of every stretch recorded, for OffsetsHolding.
  uint64_t bytes_recorded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t offsets_recorded_ ABSL_GUARDED_BY(mu_) = 0;
};

// The index of each slot, made on first use; shared by the scans of one EntryReader.
class SlotIndexes {
 public:
  SlotIndex& Of(const Slot& slot);
  // Every index made so far.
  std::vector<std::pair<Slot, SlotIndex*>> All();

 private:
  std::mutex mu_;
  std::map<Slot, std::unique_ptr<SlotIndex>> of_ ABSL_GUARDED_BY(mu_);
};

}  // namespace wal
