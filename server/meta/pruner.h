// Physical pruning (docs/ARCHITECTURE.md, "Pruning, and why it is safe"): deletes the records of
// each slot that no live namespace can read any more, with Kafka's DeleteRecords.
//
// Safety. The prune point of a slot is min(h, lowest first_entry_id of its live namespaces),
// where h is the slot's end read *before* the namespace table is brought up to the end of the
// metadata topic. With `first_entries` (a read of the slot, each namespace's first readable
// entry, or the first offset of an entry still incomplete at the read's end, whose last records
// may be on their way), a namespace counts from there instead, and one with nothing up to the
// read's end (at or past h: a read that finds a lower end fails) holds nothing back: an idle
// namespace that truncated all it had does not pin its slot; entries it appends later lie at
// or past h. A namespace created, truncated or deleted meanwhile only raises what it needs. A
// namespace missing from that table was created after h was read, so all its entries lie at or
// above h, even if its start_offset (read by its creator earlier) is below. The point is recorded
// in the metadata topic before the deletion, so a read that finds records missing below it knows
// they were pruned (and the namespace had nothing there), while records missing above it are
// reported as DATA_LOSS.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/common/metrics.h"
#include "server/meta/meta_store.h"

namespace wal {

// --prune_mode. kLogical never deletes: truncated entries are unreadable (the namespace table
// says so) and their records stay in Kafka. kDelete deletes, and reports
// every failure. kAuto deletes until the cluster refuses DeleteRecords for good (a policy, an
// ACL, a managed Kafka without it), then goes logical: one log line, walserver_prune_logical,
// no more attempts.
enum class PruneMode { kAuto, kDelete, kLogical };

class Pruner {
 public:
  // Per namespace of a slot: the id of its first readable entry (or of an entry still
  // incomplete before it); nullopt when it has none up to the slot's end as the call began,
  // which must be at least `end_at_least` (EntryReader::FirstEntriesOf).
  using FirstEntries = std::function<absl::StatusOr<std::map<uint64_t, std::optional<int64_t>>>(
      const Slot&, int64_t end_at_least, Clock::time_point deadline)>;

  // Prunes `slots` every `interval` (with jitter) through `admin` (mode kAuto or kDelete).
  // Without `first_entries`, every namespace holds its slot back from its first_entry_id.
  Pruner(MetaStore* meta, rd_kafka_t* admin, std::vector<Slot> slots,
         std::chrono::milliseconds interval, PruneMode mode, Metrics* metrics,
         FirstEntries first_entries = nullptr);
  ~Pruner();  // Stop(), then waits for the step in progress (at most kStepTimeout)

  // Asks the pruner to stop without waiting: the round in progress ends after its current step,
  // so that shutdown never waits on Kafka for more than one step.
  void Stop();

  // One round over every slot; returns the first error (the other slots are still tried).
  // In kAuto, a refusal ends the round and every later one (OK).
  absl::Status RunOnce();
  // kAuto after a refusal: no more DeleteRecords.
  bool logical() const { return logical_.load(); }

  // A round's whole budget, and the most any one Kafka query of it may take.
  static constexpr std::chrono::milliseconds kRoundTimeout{30000};
  static constexpr std::chrono::milliseconds kStepTimeout{5000};

 private:
  void Loop();
  bool stopping();
  // The lowest offset of `slot` a namespace still needs, given the lowest first_entry_id among
  // them and the slot's end `high`; `lowest` when the slot cannot be read.
  int64_t NeededFrom(const Slot& slot, int64_t lowest, int64_t high, Clock::time_point deadline);

  MetaStore* const meta_;
  rd_kafka_t* const admin_;
  const std::vector<Slot> slots_;
  const std::chrono::milliseconds interval_;
  const PruneMode mode_;
  Metrics* const metrics_;
  const FirstEntries first_entries_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> logical_{false};
  std::thread thread_;
};

}  // namespace wal
