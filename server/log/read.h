// What a read is, for every part of the read path: its parameters, where it delivers, the
// reader's options, and the state the reads and scans of one EntryReader share.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "server/common/deadline.h"
#include "server/common/metrics.h"
#include "server/log/read_batch.h"
#include "server/log/slot_index.h"
#include "wal/v1/wal.pb.h"

namespace wal {

// Where a read delivers. Implemented by the gRPC layer; called from the read's thread.
class ReadSink {
 public:
  virtual ~ReadSink() = default;
  // Blocks until the sink can take `batch` or the read was cancelled; false when cancelled.
  virtual bool Send(ReadBatch batch) = 0;
  virtual bool cancelled() const = 0;
  // Ends the read; called exactly once, last.
  virtual void Finish(absl::Status status) = 0;
};

// Bytes the reads of one ReadMany have waiting for their client together (as queues count them:
// the memory of their batches, ReadMember::Flush). Any of them
// may queue more while the call as a whole is within `limit`: one big namespace among many
// empty ones gets the room they do not use.
struct QueueBudget {
  explicit QueueBudget(size_t limit) : limit(limit) {}
  const size_t limit;
  std::atomic<size_t> queued{0};
  // Bytes by which the reads grew their batches past what they began with (ReadMember's
  // GrowBatch); at most limit / 4. The batches being filled then hold at most 3/4 of the limit
  // in entry bytes (half when they begin: batches of half a share each), 1/2 before batches
  // grew; `queued` counts their memory once queued (ReadMember::Flush).
  std::atomic<size_t> batch_growth{0};
};

struct ReadParams {
  uint64_t namespace_id = 0;
  uint64_t start_entry_id = 0;
  // Instead of start_entry_id: from the first entry encoded at or after this time (0: unused).
  int64_t start_time_ms = 0;
  uint64_t limit = 0;
  bool follow = false;
  // Lost records and corrupt entries become Gaps in the stream instead of ending it.
  bool skip_lost = false;
  // One namespace of a read of its whole slot (ReadMany's slot form): a start below the
  // namespace's first entry reads from that entry rather than OUT_OF_RANGE (what it truncated is
  // skipped), a start past the read's end (a truncation since the end was queried) reads
  // nothing, and a namespace deleted before or during the read ends OK: the namespace is gone,
  // not the read.
  bool slot_read = false;
  // The pruner's read (EntryReader::FirstEntriesOf), which must never report a namespace as
  // needing less than it does: an entry still incomplete when the read reaches its end (its last
  // records may be on their way) comes as a Gap (REASON_UNSPECIFIED) from its first offset,
  // rather than being dropped as a torn entry is; and an entry found comes even when truncated
  // between the scan and the delivery (dropped then, it would have spent a limit of 1 and left
  // the namespace with no entry at all).
  bool for_pruner = false;
  // A slot read whose end is found below this fails UNAVAILABLE (the pruner's: it prunes up to
  // an end it queried before, and must have read that far).
  int64_t slot_end_at_least = 0;
  Clock::time_point deadline = Clock::time_point::max();
  // Bytes this read may have waiting for its client, and about how many entry bytes go in one
  // message; 0: ReaderOptions::read_queue_bytes and batch_bytes. The reads of one ReadMany go
  // by their call's budget instead (below), with batches sized from a share of it.
  size_t queue_bytes = 0;
  size_t batch_bytes = 0;
  std::shared_ptr<QueueBudget> call_budget;
};

struct ReaderOptions {
  size_t max_concurrent_reads = 64;
  size_t max_idle_consumers = 4;  // of each FetchSize
  uint64_t max_entry_bytes = 64 << 20;
  size_t batch_bytes = 1 << 20;  // a response message carries about this much
  // Bytes a read may have waiting for its client (the memory of its batches, ReadMember::Flush). A
  // read whose client falls further behind leaves the shared scan of its slot (which waits for no
  // other call's client) and goes on with a scan of its own once its client caught up (which waits
  // up to a second for it).
  size_t read_queue_bytes = 8 << 20;
  // A read's client that took no batch for this long counts as stalled, not slow
  // (ReadMember::pulling): a shared scan waits for a slow one, and takes a stalled one off.
  std::chrono::milliseconds pulling_window{100};
  // A read from a time starts at the offset Kafka gives for that time (offsets-for-times) rather
  // than at the namespace's first entry. False on the mock cluster, which cannot answer it.
  bool offsets_for_times = true;
  // Each read asks Kafka for its topics' ids, so that a slot's index built from a topic since
  // made again is dropped (log/slot_index.h). False on the mock cluster, which has no
  // controller to ask (and whose topics cannot be deleted).
  bool topic_ids = true;
  // Scans skip the stretches of a slot that the slot's index says hold no record of their reads
  // (log/slot_index.h). Off: every scan reads every record, as before the index.
  bool slot_index = true;
  // A scan goes past no fewer bytes than this at once: a seek costs a fetch round trip, about
  // what reading a MiB costs, so a namespace spread thinly over its slot is read through.
  uint64_t index_min_skip_bytes = 1 << 20;
  // fetch.message.max.bytes of a scan that skips (FetchSize::kNarrow; at most the configured
  // one): a 1% namespace in runs of 26 KiB costs 1.3 bytes fetched per byte delivered at 16 KiB,
  // 4.9 at 64 KiB (docs/benchmarks/2026-12-03-slot-index.md).
  int64_t narrow_fetch_bytes = 16 << 10;
  // One past the highest offset of a slot Kafka acknowledged to this server's writer (0: none
  // known). A read whose queried end is lower asks again for a while: it came from a leader cut
  // off from the others, which has not heard yet that it was replaced (EntryReader::QueryEnds).
  std::function<int64_t(const Slot&)> acknowledged_end;
};

// Bytes all the reads of one ReadMany may have waiting for its client together, and the
// least share of it (a read's batches are half its share).
inline constexpr size_t kReadManyQueueBytes = 64 << 20;
// Ends of namespaces with nothing to read that one message of a ReadMany carries at most (a few
// bytes each): a slot of very many namespaces stays far under gRPC's 4 MiB message limit.
inline constexpr int kMaxEndsPerMessage = 50000;
inline constexpr size_t kReadManyMinQueueBytes = 64 << 10;

// Shared by the reads and scans of one EntryReader; outlives them all.
struct ReadContext {
  ReaderOptions options;
  // The truncation point now of a namespace's incarnation (the meta_offset of the state its
  // read started on); nullopt once that incarnation is deleted, also when the namespace was
  // created again since (the meta store's, or a test's).
  std::function<std::optional<int64_t>(uint64_t namespace_id, int64_t incarnation)>
      truncated_before;
  Metrics* metrics = nullptr;
  SlotIndexes slot_indexes;
  std::atomic<uint64_t> records_skipped{0};  // records not written by walserver, or undecodable
  std::atomic<bool> stopping{false};         // graceful shutdown: every read ends UNAVAILABLE
  // For tests: called on a scan's thread when it has chosen to skip and before it publishes
  // that, so that a test can make a read join in between.
  std::function<void()> before_skip_for_test;
};

}  // namespace wal
