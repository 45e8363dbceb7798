// Appends entries to their slots through a pool of idempotent producers. Each producer owns a
// fixed share of the slots, so the records of one slot, and the chunks of one entry, always go
// through one producer in order. Calls complete from delivery reports: no thread waits per call.
// docs/ARCHITECTURE.md, "Following an Append", has the whole path.
//
// Group commit: the entries of one call for one slot leave together, the small entries of
// different namespaces packed into shared Kafka records (record_format.h). While a slot has
// `slot_flushes_in_flight` groups of records produced and not yet reported, the entries for it
// from every call wait in the slot's queue; when a group is reported, everything queued leaves
// as the next group. No timer: what gathers is what arrives while Kafka is busy with the slot,
// as a database's group commit does.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/kafka/client.h"
#include "server/kafka/producer.h"
#include "server/kafka/recovering_producer.h"
#include "server/log/record_format.h"
#include "server/meta/namespace_table.h"

namespace wal {

struct WriterOptions {
  int producers = 2;
  size_t max_record_bytes = 1000000;  // value bytes of one Kafka record, header included
  // An append not acknowledged within this time (or shortly before the caller's deadline)
  // completes with UNAVAILABLE; its outcome is then unknown.
  std::chrono::milliseconds append_timeout{30000};
  // The slot topics: each producer learns their leaders at start-up, so that the first append
  // to a topic does not wait for a metadata round trip.
  std::vector<std::string> topics;
  // Groups of records a slot keeps in flight before its entries queue to be packed together.
  // librdkafka pipelines up to 5 requests per broker, so waiting for fewer in flight adds a
  // round trip per call: 1 gave 28-31k entries/s single against 41k for 4
  // (docs/benchmarks/2026-12-06-group-commit.md).
  int slot_flushes_in_flight = 4;
  // Entries whose record is larger than this go as records of their own, never packed.
  size_t max_packed_entry_bytes = 64 * 1024;
  // False: every entry is a record of its own (format 1), for a rolling upgrade from a
  // walserver that cannot read packed records (it would skip their entries).
  bool packed_records = true;
};

struct AppendItem {
  Slot slot;
  uint64_t namespace_id = 0;
  std::string_view data;  // copied into records before Append returns
  EntryStamp stamp;
  // A fence record of stamp.epoch instead of an entry (AcquireNamespace); `data` is unused.
  bool fence = false;
  // The CRC-32C of `data` its appender sent and walserver checked; computed when absent.
  std::optional<uint32_t> crc32c = std::nullopt;
};

class EntryWriter {
 public:
  using Callback = std::function<void(absl::StatusOr<std::vector<uint64_t>>)>;

  static absl::StatusOr<std::unique_ptr<EntryWriter>> Create(const KafkaProperties& properties,
                                                             const WriterOptions& options,
                                                             const std::string& name);
  ~EntryWriter();

  // Appends `items` and calls `done` exactly once, with one entry id per item or the first error,
  // from a producer's poll thread or the timer thread (or inline when nothing could be sent).
  // Never blocks. `deadline` is the caller's; the call completes a little before it.
  // `done` is destroyed only once librdkafka has reported every record, which may be after it
  // was called: what it holds lives as long as the records do.
  void Append(std::vector<AppendItem> items, Clock::time_point deadline, Callback done);

  // For shutdown: fails the records waiting in the producers (their calls answer UNAVAILABLE,
  // retry-safe with the same sequences) and every later Append, so that no call waits on an
  // unreachable Kafka any longer.
  void FailPending();

  // The producers of the pool, for metrics.
  std::vector<const Producer*> producers() const;
  // Producers replaced after a fatal error.
  uint64_t replacements() const;
  // Packed records produced, and the entries (and fences) they carried.
  uint64_t packed_records() const { return packed_records_.load(); }
  uint64_t packed_entries() const { return packed_entries_.load(); }
  // One past the highest offset of `slot` Kafka acknowledged to this writer (0 if none): the
  // slot's high watermark is at least this, whatever a stale leader says (EntryReader).
  int64_t AcknowledgedEnd(const Slot& slot) const;
  // The slots with records out whose last report (or, with none yet, whose first record out) is
  // at least `quiet` ago: a leader that takes records and never answers (stale_leaders.h).
  std::vector<Slot> StalledSlots(std::chrono::milliseconds quiet) const;

 private:
  class Call;
  friend class Call;
  struct Group;
  struct Outgoing;
  // One format-1 record of a call, waiting in its slot's queue or on its way.
  struct Part {
    Call* call = nullptr;
    uint32_t item = 0;
    bool first_of_entry = false;
    bool packable = false;  // the whole of a small entry, or a fence
    uint64_t namespace_id = 0;
    std::string_view record;  // in the call's buffer
  };
  struct SlotQueue {
    std::vector<Part> queued;
    int groups_in_flight = 0;
    // When a record of the slot was last written, or a group left with none out before.
    Clock::time_point last_progress;
  };
  struct ProducerSlot {
    // Keeps the records of one slot in queue order, and the chunks of one entry contiguous.
    std::mutex produce_mu;
    std::unique_ptr<RecoveringProducer> producer ABSL_PT_GUARDED_BY(produce_mu);
    std::map<Slot, SlotQueue> queues ABSL_GUARDED_BY(produce_mu);
  };
  // A part that will not be reported by Kafka, and why.
  struct Failed {
    Part part;
    absl::Status status;
  };

  EntryWriter(const KafkaProperties& properties, const WriterOptions& options, std::string name)
      : properties_(properties), options_(options), name_(std::move(name)) {}
  ProducerSlot& OwnerOf(const Slot& slot);
  // The records of every item in one buffer (returned), all stamped with this process's source
  // and the time now: `records` gets a view of each, item by item, and `first_record` the index
  // of each item's first and, last, the number of records.
  std::unique_ptr<char[]> Encode(const std::vector<AppendItem>& items,
                                 std::vector<std::string_view>* records,
                                 std::vector<size_t>* first_record);
  // Produces everything queued for `slot` as one group: packable parts of different namespaces
  // share records, in queue order per namespace. Parts that could not be produced go to `failed`
  // (to be failed once produce_mu is let go: a call may complete there).
  void Flush(ProducerSlot& owner, const Slot& slot, SlotQueue& queue, std::vector<Failed>* failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner.produce_mu);
  // The packed (or single) records of `parts`, at most one part per namespace each.
  std::vector<std::vector<Part>> Pack(std::vector<Part>::const_iterator begin,
                                      std::vector<Part>::const_iterator end) const;
  void OnOutgoing(Outgoing* outgoing, const Delivery& delivery);
  static void FailParts(std::vector<Failed> failed);
  static absl::Status ShuttingDown();
  void TimerLoop();
  void ArmTimer(Call* call, Clock::time_point when);
  // True if the timer still held the call (and so the caller now owns the timer's reference).
  bool DisarmTimer(Call* call);

  const KafkaProperties properties_;
  const WriterOptions options_;
  const std::string name_;
  std::vector<std::unique_ptr<ProducerSlot>> producers_;
  std::atomic<uint64_t> next_nonce_{0};
  std::atomic<bool> failing_{false};  // FailPending() was called
  RecordSource source_;               // session and origin of every record written
  std::atomic<uint64_t> packed_records_{0};
  std::atomic<uint64_t> packed_entries_{0};
  mutable std::mutex acknowledged_mu_;
  std::map<Slot, int64_t> acknowledged_end_ ABSL_GUARDED_BY(acknowledged_mu_);

  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  std::multimap<Clock::time_point, Call*> timers_ ABSL_GUARDED_BY(timer_mu_);
  bool stop_ ABSL_GUARDED_BY(timer_mu_) = false;
  std::thread timer_thread_;
};

}  // namespace wal
