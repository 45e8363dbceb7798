// A slot scan: one consumer reading one slot for every read of that slot running at the same
// time, so that a datanode opening all its regions reads each slot once, not once per region.
//
// How a read moves through scans (EntryReader::Join does the joining):
//
//   read thread                      scan thread (Run)
//   -----------                      -----------------
//   TryJoin: scan not past my start  Admit: pending_ -> members_
//     -> pending_                    Poll a record -> by_namespace_ -> ReadMember::OnRecord
//   TryJoin: scan past my start,     nothing fetched / end of partition / Kafka error
//     but young (< 256 MiB read)       -> every member's OnIdle (finish, deadline, truncation)
//     -> rewinding_                  Admit: rewinding_ -> members_, seek back to rewind_to_
//   TryJoin refused (too far on)     member done (end, limit, cancelled, deadline) -> dropped
//     -> a new scan for the slot     member's queue over its bound -> Detach: it leaves, and its
//   ReadMember::Deliver: detached,     read thread joins a scan of its own (never shared); a
//     queue drained -> a scan of       ReadMany alone in the scan is waited for while it pulls
//     its own from resume_at()       no member left -> closed; later reads start a new scan
//
// Threads and what they own:
// - mu_ guards what joining read threads and the scan thread share: pending_, rewinding_,
//   rewind_to_, the published position_, first_start_, scanned_bytes_, closed_.
// - Only the scan thread touches members_, by_namespace_, the end bounds, the consumer and the
//   loop state (next_, furthest_, the check times). A member is the scan thread's while it is in
//   members_ (see read_member.h).
// - The host (EntryReader) owns the consumer pool and the list of joinable scans, under its own
//   mutex; a scan calls it without holding mu_.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/common/slot.h"
#include "server/kafka/consumer.h"
#include "server/log/read.h"
#include "server/log/read_member.h"
#include "server/log/record_format.h"
#include "server/log/slot_index.h"

namespace wal {

class SlotScan;

// How much a scan's consumer fetches at once (per fetch of the slot's partition).
enum class FetchSize {
  // As configured (ReaderFetchBytes): a scan that wants most records fetches few times.
  kWide = 0,
  // ReaderOptions::narrow_fetch_bytes: a scan that skips gets little past each run of records
  // it wants, where a wide fetch (and librdkafka's read-ahead behind it) brings several times
  // the run, which the next skip throws away.
  kNarrow = 1,
};

// What a scan needs from the reader that runs it.
class ScanHost {
 public:
  virtual ~ScanHost() = default;
  virtual absl::StatusOr<std::unique_ptr<Consumer>> AcquireConsumer(FetchSize size) = 0;
  // `fetch_may_wait`: the consumer may have reached the partition's end, so a fetch of it may
  // still be waiting there at the broker (Consumer::kDefaultFetchWaitMs).
  virtual void ReleaseConsumer(std::unique_ptr<Consumer> consumer, FetchSize size,
                               bool fetch_may_wait) = 0;
  // The first offset of `slot` still in Kafka.
  virtual absl::StatusOr<int64_t> LowWatermark(const Slot& slot, Clock::time_point deadline) = 0;
  // Records [from, low) of `slot` are missing from Kafka: OK if walserver pruned them, else
  // DATA_LOSS (or another error when that cannot be told by `deadline`).
  virtual absl::Status PrunedOrLost(const Slot& slot, int64_t from, int64_t low,
                                    Clock::time_point deadline) = 0;
  // Called last, on the scan's thread.
  virtual void ScanEnded(SlotScan* scan) = 0;
};

class SlotScan : public std::enable_shared_from_this<SlotScan> {
 public:
  // A scan that is not `shared` serves the one read that joins it: it waits a while for that
  // read's client before it detaches it (nobody else is held up).
  SlotScan(ScanHost* host, ReadContext* context, Slot slot, bool shared)
      : host_(host),
        context_(context),
        slot_(std::move(slot)),
        shared_(shared),
        index_(context->options.slot_index ? &context->slot_indexes.Of(slot_) : nullptr) {}

  // False when the scan is ending, or has passed `member`'s start too far to go back for it.
  bool TryJoin(const std::shared_ptr<ReadMember>& member);

  // The scan thread: scans until no member is left, then ends the members still in it with the
  // scan's error and tells the host.
  void Run();

 private:
  // Reads of one slot tend to arrive together (a datanode opening its regions): a scan waits
  // this long for them before it starts; later ones make it go back (TryJoin).
  static constexpr auto kJoinWindow = std::chrono::milliseconds(5);
  // A scan goes back for a late joiner only while it has read less than this; past it, the
  // joiner gets a scan of its own.
  static constexpr int64_t kMaxRewindBytes = 256 << 20;
  // How long a poll waits when records are known to exist below bounded_end_, and when the scan
  // waits for new ones at the end of the slot.
  static constexpr auto kPollWhileBehind = std::chrono::milliseconds(20);
  static constexpr auto kPollAtEnd = std::chrono::milliseconds(100);
  // Every member hears of cancellation and deadlines, and sends what it has, this often even
  // while records keep coming.
  static constexpr auto kMemberCheckInterval = std::chrono::milliseconds(100);
  // How long a scan of its own waits for its read's client to make room (WaitForSlowClients).
  static constexpr auto kMaxWaitForRoom = std::chrono::seconds(1);
  // The index is worth a seek (a fetch round trip) past at least this many records, and
  // ReaderOptions::index_min_skip_bytes.
  static constexpr int64_t kMinSkip = 32;
  // SkipAhead costs up to a lookup per member: it looks again one record on per this many members,
  // and at most kMaxRecheck records on (another scan may have indexed what lies ahead).
  static constexpr int64_t kMembersPerRecheck = 8;
  static constexpr int64_t kMaxRecheck = 4096;
  // The scan tells the index what it saw at least every this many records.
  static constexpr size_t kRecordEvery = 4096;
  // A scan fetching narrow since it skipped goes back to wide fetches once it has read this many
  // bytes without a skip: its reads want most records again, and a wide fetch reads them 1.3-1.8x
  // faster (docs/benchmarks/2026-12-03-slot-index.md); changing consumers costs about one fetch
  // round trip.
  static constexpr int64_t kWideAgainAfterBytes = 1 << 20;

  // The steps of Scan(), each on the scan thread.
  absl::Status Scan();
  absl::Status Start();
  // Moves newly joined members in; false when no member is left (and no more may join). Sets
  // `*rewind_to` when members joined behind the scan (it must go back there first).
  bool Admit(int64_t* rewind_to);
  absl::Status Rewind(int64_t to);
  void OnEndOfPartition(int64_t offset);
  absl::Status OnKafkaError(rd_kafka_resp_err_t err, int64_t offset);
  // Kafka answered that records at next_ are gone (out of range).
  absl::Status OnLostRecords();
  void OnRecord(const rd_kafka_message_t& msg);
  // One namespace's record at `offset`: a Kafka record of its own, or its part of a packed one.
  void OnNamespaceRecord(int64_t offset, uint64_t namespace_id, std::string_view value);
  // Drops finished members and indexes the rest by namespace, so that a record costs a lookup,
  // not a call per member (100 reads of a slot share its scan).
  void Reindex();
  // Every member hears where the scan is (see ReadMember::OnIdle); some may finish.
  void AllIdle(bool at_end_of_partition, const absl::Status& status);
  // Members of the namespaces in unsent_ send what they have; the others are not looked at (a
  // ReadMany may bring a thousand). Those whose queue is then full leave as DetachOverLimit says.
  void SendUnsent();
  // Members whose queue is full leave a shared scan, so that it never waits on another call's
  // client; each carries on with a scan of its own (ReadMember::Deliver). The exception
  // (WaitForPullingClients): the members of one ReadMany, alone in the scan, whose client keeps
  // pulling; detaching them would cost a rewind or a new scan per queue-full. A scan of its own
  // first waits for its client (WaitForSlowClients).
  void DetachOverLimit();
  // A shared scan: while a full member's client keeps pulling (ReadMember::pulling) and waiting
  // holds up no other call (OnlyItsCallWaits), waits for room in its queue. The scan then goes
  // at that client's pace; a client that stops pulling holds it for at most
  // ReaderOptions::pulling_window.
  void WaitForPullingClients();
  // Every other member still reading belongs to `m`'s call (a ReadMany), and no read waits to
  // join the scan.
  bool OnlyItsCallWaits(const ReadMember& m);
  // A scan that serves one read: while that read's queue is full, reads no further (so the
  // queue stays bounded) for up to kMaxWaitForRoom. A slow client then goes on without a new
  // scan per queue-full; a stalled one is detached after all, so it holds no consumer.
  void WaitForSlowClients();
  // Records [next_, low) are gone from Kafka and nobody pruned them: the members that still
  // need some of them end with `loss`; the others go on.
  void LoseRange(int64_t low, const absl::Status& loss);
  // Where the scan should start for `members` (each from its resume_at()): the first offset
  // where the index says one of them may have a record.
  int64_t FirstNeeded(const std::vector<std::shared_ptr<ReadMember>>& members) const;
  // Goes past the records the index vouches none of the members needs (a seek) when there are
  // enough of them, and decides when to look again (recheck_at_).
  absl::Status SkipAhead();
  // Tells the index that the scan read every record of [covered_from_, next_).
  void RecordCovered();
  // Fetching goes on from `offset`, with fetches of `size`: a consumer of that size takes over
  // there (assigned), or when it is of that size already or none can be had, the consumer's
  // position moves (a seek). An error is the seek's: the consumer's position is in doubt.
  absl::Status FetchFrom(int64_t offset, FetchSize size);
  // For ReleaseConsumer. (A consumer that fetched ahead of next_ to the end is not seen.)
  bool FetchMayWait() const { return next_ >= known_end_; }

  ScanHost* const host_;
  ReadContext* const context_;
  const Slot slot_;
  const bool shared_;
  SlotIndex* const index_;    // null when ReaderOptions::slot_index is off
  uint64_t log_changes_ = 0;  // the index's when the scan began on the log it reads

  // The scan thread's.
  std::unique_ptr<Consumer> consumer_;
  FetchSize fetch_size_ = FetchSize::kWide;  // consumer_'s
  int64_t bytes_since_skip_ = 0;
  int64_t next_ = 0;      // the next offset to hand to members
  int64_t furthest_ = 0;  // records below were scanned at least once
  Clock::time_point last_member_check_ = Clock::now();
  std::vector<std::shared_ptr<ReadMember>> members_;
  std::vector<PackedPart> packed_;  // the parts of the packed record being read
  std::unordered_map<uint64_t, std::vector<ReadMember*>> by_namespace_;
  int64_t min_end_ = 0;
  int64_t max_end_ = 0;
  // Records below exist: the furthest end of a read that is not following.
  int64_t bounded_end_ = 0;
  // The same over the whole scan, and the partition's end where the scan met it: a consumer
  // fetching from here on may be waiting at the broker for new records.
  int64_t known_end_ = 0;
  bool changed_ = true;  // members_ may hold finished members; by_namespace_ is stale
  // Records from here on are new to every member: past the slot's end when each read began.
  int64_t tail_from_ = 0;
  // Namespaces whose members were handed records at the tail (from tail_from_) since they last
  // sent what they have: the next poll does not wait, and when librdkafka has nothing more at
  // hand, they send (SendUnsent).
  std::set<uint64_t> unsent_;
  // For the index: the scan read every record from covered_from_ to next_, and seen_ are the
  // ones walserver wrote; SkipAhead runs when next_ reaches recheck_at_.
  int64_t covered_from_ = 0;
  std::vector<SlotIndex::Seen> seen_;
  uint64_t covered_bytes_ = 0;
  int64_t recheck_at_ = 0;
  // After an Assign, no seek until the fetcher started (librdkafka answers _STATE before).
  int64_t no_seek_before_ = 0;

  std::mutex mu_;
  std::vector<std::shared_ptr<ReadMember>> pending_ ABSL_GUARDED_BY(mu_);
  // Joined behind the scan's position: admitted when the scan goes back to rewind_to_.
  std::vector<std::shared_ptr<ReadMember>> rewinding_ ABSL_GUARDED_BY(mu_);
  int64_t rewind_to_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::max();
  // The next offset the scan will hand out, as joiners see it; -1 before the scan starts.
  int64_t position_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t first_start_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes of the records from first_start_ to the furthest position.
  int64_t scanned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace wal
