// Keeps an append retried with the same writer id and sequences from writing its entries a second
// time (docs/CONTRACT.md, "Append"): a retry is answered with the ids of the copies already
// written. A first copy can be in two places:
// - in this walserver's hands: every stamped entry is claimed from before it is written until
//   librdkafka reported its records; a retry of a claimed entry waits for that outcome, so it
//   never races its own first copy, and takes its id (or finds the copy in the log, when the call
//   had ended before its records were reported);
// - in the log, written by this process, by one killed since, or by another walserver on the same
//   topics: a retry reads its slots from when its first attempt was sent
//   (AppendRequest.first_attempt_age_ms before it arrived, less kClockMargin) to their ends and
//   takes the id of each entry it finds there whole.
// A retry claims its entries before it reads the log, so that another attempt at them (the same
// retry sent again, a first attempt that arrives late) waits for its outcome; what it does not
// find, it writes.
//
// What remains possible: a first copy still on its way in another process (another walserver's
// producer, or a request a killed walserver had sent that the broker appends after the retry
// read the slot's end) is written again when it lands after the retry looked. Reads still drop
// such a copy when they saw the first (log/entry_assembler.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/common/slot.h"
#include "server/common/work_queue.h"
#include "server/kafka/client.h"
#include "server/log/entry_writer.h"

namespace wal {

// An entry as its writer names it: the same in every copy.
struct SequenceKey {
  uint64_t namespace_id = 0;
  uint64_t writer_id = 0;
  uint64_t sequence = 0;

  bool operator==(const SequenceKey& o) const {
    return namespace_id == o.namespace_id && writer_id == o.writer_id && sequence == o.sequence;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SequenceKey& k) {
    return H::combine(std::move(h), k.namespace_id, k.writer_id, k.sequence);
  }
};

struct RetriedEntriesOptions {
  KafkaProperties consumer;     // the scans' consumers
  rd_kafka_t* admin = nullptr;  // watermark and time queries
  // False on the mock cluster, which cannot look up a time: scans start at the slot's first
  // record.
  bool offsets_for_times = true;
  // One past the highest offset of a slot Kafka acknowledged to this walserver: a scan reads at
  // least that far, whatever a stale leader says the end is (EntryWriter::AcknowledgedEnd).
  std::function<int64_t(const Slot&)> acknowledged_end;
  // Where the namespace's present incarnation begins in its slot (NamespaceState::start_offset):
  // a copy below it belongs to a namespace deleted since, which reads never give.
  std::function<int64_t(uint64_t namespace_id)> namespace_start;
  // Lookups at once: each holds a thread while it waits for a first copy or reads a slot.
  int threads = 8;
  // A lookup for a call without a (shorter) deadline gives up after this.
  std::chrono::milliseconds max_lookup{30000};
  std::string name;  // this walserver's, in the consumers' ids
};

class RetriedEntries {
 public:
  // Holds the claim on the stamped entries of one write until it is dropped (when librdkafka
  // reported the write's records: EntryWriter drops its callback then).
  class Claim {
   public:
    ~Claim();
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    // The write succeeded with `ids`, one per item of the write: retries waiting take theirs.
    void Written(const std::vector<uint64_t>& ids);

   private:
    friend class RetriedEntries;
    explicit Claim(RetriedEntries* owner) : owner_(owner) {}
    RetriedEntries* const owner_;
    // Each claimed entry, with the index of its item in the write.
    std::vector<std::pair<SequenceKey, size_t>> keys_;
  };
  // Per item of a retry: the id of its copy already written, or nothing (write it).
  using Found = std::vector<std::optional<uint64_t>>;
  using LookDone = std::function<void(absl::StatusOr<Found>, std::shared_ptr<Claim>)>;

  // A retry reads from this long before its first attempt: the walservers that wrote the copies
  // stamped them with their own clocks, which may be behind this one's by that much.
  static constexpr std::chrono::milliseconds kClockMargin{10000};
  // A retry that does not say when its first attempt was sent, but whose entry this walserver
  // holds in flight, looks this far back.
  static constexpr std::chrono::milliseconds kUnsaidLookback{60000};

  explicit RetriedEntries(RetriedEntriesOptions options);
  ~RetriedEntries();  // waits for the lookups under way

  // For a first attempt: claims its stamped items (their index in `items` is their index in the
  // write). Null, claiming nothing, when one of them is claimed already: the append is a retry
  // of an entry in flight here, whatever it says, and goes through Look.
  std::shared_ptr<Claim> ClaimFirstAttempt(const std::vector<AppendItem>& items);
  // For a retry (its first attempt sent at `first_attempt_ms`, ms since the Unix epoch by this
  // walserver's clock; 0 when unsaid): finds the items already written and claims the rest, whose
  // index in the write is their rank among the items not found. `done` runs once, on a thread of
  // this class, by about halfway to `deadline` (the write gets the other half): UNAVAILABLE when
  // a first copy was still in flight or a slot could not be read by then, DEADLINE_EXCEEDED when
  // the lookup could not start in time (nothing written either way; the appender retries).
  void Look(std::vector<AppendItem> items, int64_t first_attempt_ms, Clock::time_point deadline,
            LookDone done);

  // For shutdown: lookups under way and later ones end at once with UNAVAILABLE.
  void Stop();
  // Stop, then waits for every lookup to end (their `done` runs). Before the writer goes: `done`
  // hands what was not found to it.
  void Close();

  // For tests: retries waiting for a first copy in flight.
  int waiting() const;

 private:
  struct InFlight {
    explicit InFlight(const Claim* claimed_by) : by(claimed_by) {}
    const Claim* by = nullptr;  // null once settled, while retries still wait on it
    std::optional<uint64_t> id;
    int waiters = 0;
  };

  // How long a scan that reached the leader's end waits for the rest of what this walserver was
  // acknowledged, before it takes the leader's end.
  static constexpr std::chrono::seconds kStaleEndWait{2};
  // The index of a claimed entry that the write does not carry (found in the log).
  static constexpr size_t kNotWritten = std::numeric_limits<size_t>::max();

  absl::StatusOr<Found> Resolve(const std::vector<AppendItem>& items, int64_t first_attempt_ms,
                                Clock::time_point deadline, std::shared_ptr<Claim>* claim);
  // Reads `slot` from `since_ms` to its end; the id of each wanted entry found goes to `found`.
  // `wanted`: each entry, and the lowest offset its copy may have.
  absl::Status Scan(const Slot& slot, int64_t since_ms, Clock::time_point deadline,
                    const absl::flat_hash_map<SequenceKey, int64_t>& wanted,
                    absl::flat_hash_map<SequenceKey, uint64_t>* found);
  void Release(const Claim* claim);

  const RetriedEntriesOptions options_;
  mutable std::mutex mu_;
  std::condition_variable settled_;
  absl::flat_hash_map<SequenceKey, InFlight> in_flight_ ABSL_GUARDED_BY(mu_);
  // Retries waiting for a first copy; written under mu_, read without it by Claim::Written.
  std::atomic<int> waiting_{0};
  std::atomic<bool> stopping_{false};
  // What ClaimFirstAttempt gives appends without stamped entries: nothing to hold.
  const std::shared_ptr<Claim> nothing_claimed_;
  std::unique_ptr<WorkQueue> lookups_;  // last: its threads stop before the rest goes
};

inline bool IsStamped(const AppendItem& item) {
  return !item.fence && item.stamp.writer_id != 0 && item.stamp.sequence != 0;
}

// Whether two stamped items name the same entry (namespace, writer, sequence).
bool HasRepeatedEntry(const std::vector<AppendItem>& items);

}  // namespace wal
