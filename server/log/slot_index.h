// Where each namespace's records lie in one slot, over the stretch of offsets that this
// walserver's scans have read whole: a scan skips what none of its reads' namespaces has
// records in (SlotScan::SkipAhead), so a small namespace behind much of another's data costs
// its own records, not the slot's.
//
// Why a read never misses a record: the index vouches only for [from, to), one contiguous
// stretch that scans read every record of (SlotIndex::Record). Records in Kafka never move and
// walserver never writes below a partition's end, so a record of a namespace in that stretch is
// one a scan saw and put in the namespace's runs. Outside it (before the first scan, past its
// end, below what Kafka lost) nothing is vouched for and a scan reads every record. The index
// lives only in memory: a restarted walserver builds it again from its first scans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "server/common/slot.h"

namespace wal {

class SlotIndex {
 public:
  // A namespace's records inside [first, last]; records of others may lie between them.
  struct Run {
    int64_t first;
    int64_t last;
  };
  // A record a scan saw.
  struct Seen {
    uint64_t namespace_id;
    int64_t offset;
  };
  // Where a read of a namespace must read from `from` on: [begin, end) may hold its records;
  // none lie in [from, begin). `end` is max() where the index vouches for nothing.
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

  // A scan read every record of [from, to), `bytes` in all; `seen` are those walserver wrote, in
  // any order. Extends the vouched stretch when it meets or touches it; a newer stretch apart
  // from it replaces it, an older one is ignored.
  void Record(int64_t from, int64_t to, const std::vector<Seen>& seen, uint64_t bytes);
  // Records below `low` are gone from Kafka: no longer vouched for, so a read starting below
  // it meets the loss as it would without an index.
  void ForgetBelow(int64_t low);
  Stretch NextStretch(uint64_t namespace_id, int64_t from) const;
  // About how many offsets of the slot hold `bytes`, from the records scans read (one offset
  // per byte before any).
  int64_t OffsetsHolding(uint64_t bytes) const;

  // For tests and metrics.
  size_t runs() const;
  int64_t vouched_from() const;
  int64_t vouched_to() const;

 private:
  void Add(uint64_t namespace_id, int64_t offset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Clear(int64_t at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable std::mutex mu_;
  int64_t from_ ABSL_GUARDED_BY(mu_) = 0;  // vouched: [from_, to_)
  int64_t to_ ABSL_GUARDED_BY(mu_) = 0;
  // Sorted, apart by more than kJoinGap, all inside [from_, to_).
  std::unordered_map<uint64_t, std::vector<Run>> runs_ ABSL_GUARDED_BY(mu_);
  size_t run_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Of every stretch recorded, for OffsetsHolding.
  uint64_t bytes_recorded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t offsets_recorded_ ABSL_GUARDED_BY(mu_) = 0;
};

// The index of each slot, made on first use; shared by the scans of one EntryReader.
class SlotIndexes {
 public:
  SlotIndex& Of(const Slot& slot);

 private:
  std::mutex mu_;
  std::map<Slot, std::unique_ptr<SlotIndex>> of_ ABSL_GUARDED_BY(mu_);
};

}  // namespace wal
