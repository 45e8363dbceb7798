// One read, as a member of slot scans (slot_scan.h). A scan thread feeds it the records of its
// slot (OnRecord) and tells it where the scan stands when nothing is coming (OnIdle); the member
// filters by key, reassembles entries and queues batches. The read's own thread (Deliver) sends
// the batches to the client. A shared scan never waits on another call's client: a member whose
// queue is over its bound is detached (Detach), and its read thread, once the queue drained,
// starts a scan of its own from resume_at(); that one waits up to a second for room before
// detaching. The members of one ReadMany alone in a scan are waited for while their client keeps
// pulling (pulling()).
//
// Threads. The assembler, the batch being filled and the offsets belong to one scan thread at a
// time: the one whose scan holds the member. The member moves between scans only through a
// scan's mutex (joining) or through Detach -> Deliver -> the reader joining it again, so two
// scans never touch it at once. The queue and the flags under mu_ are shared with the read
// thread. done() and the cancel flag are atomics, read by both.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "server/common/deadline.h"
#include "server/common/slot.h"
#include "server/log/entry_assembler.h"
#include "server/log/read.h"
#include "server/log/read_batch.h"
#include "server/meta/namespace_table.h"
#include "wal/v1/wal.pb.h"

namespace wal {

// Wakes a thread that delivers several members' batches (a ReadMany) when any of them has
// something for it: a batch queued, a detach, an end, or its backlog caught up.
class DeliveryBell {
 public:
  uint64_t rung() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rung_;
  }
  void Ring() {
    std::lock_guard<std::mutex> lock(mu_);
    ++rung_;
    cv_.notify_all();
  }
  // Until the bell rang since `seen` (a value of rung()), or `at_most` passed.
  void WaitPast(uint64_t seen, Clock::duration at_most) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, at_most, [&] { return rung_ != seen; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t rung_ ABSL_GUARDED_BY(mu_) = 0;
};

class ReadMember {
 public:
  // Reads `params.namespace_id` (whose state was `ns` when the read began) from offset `start`
  // to `end` (when following, only to say it caught up), delivering to `sink` until `stop_at`.
  // `bell`, if any, rings whenever the read's thread has something to do for this member.
  ReadMember(ReadContext* context, const ReadParams& params, std::shared_ptr<ReadSink> sink,
             NamespaceState ns, int64_t start, int64_t end, Clock::time_point stop_at,
             std::shared_ptr<DeliveryBell> bell = nullptr);
  ~ReadMember();

  uint64_t namespace_id() const { return params_.namespace_id; }
  const Slot& slot() const { return ns_.slot; }
  // Where a scan must start for this member: its start, or past what it was handed already.
  int64_t resume_at() const { return std::max(start_, next_offset_); }
  int64_t end() const { return end_; }
  // The slot's end when the read began: past it, a follower is at the tail.
  int64_t caught_up_at() const { return caught_up_at_; }
  bool done() const { return done_; }
  // The queue is over its bound: the scan should detach this member (scan thread).
  bool over_limit() const { return over_limit_; }
  // The read's client took a batch within ReaderOptions::pulling_window, or its queue was empty
  // until less than that ago: a client that keeps pulling, however slowly, as opposed to a
  // stalled one.
  bool pulling() const {
    return Clock::now() - Clock::time_point(Clock::duration(last_progress_.load())) <
           context_->options.pulling_window;
  }
  // The queue budget of the call this read belongs to (a ReadMany), or null.
  const QueueBudget* call_budget() const { return params_.call_budget.get(); }

  // A record of the slot at `offset` (scan thread).
  void OnRecord(int64_t offset, uint64_t key, std::string_view value);
  // The scan is at `position` and has nothing more just now (scan thread): queues what is
  // batched, finishes when the range is done, cancelled or out of time, and applies a
  // truncation or deletion made since the read began.
  void OnIdle(int64_t position, bool at_end_of_partition, const absl::Status& kafka_error);
  // The scan has no more records at hand just now (scan thread): queues what is batched, so
  // that a follower gets an entry as soon as it is in.
  void SendBatched() {
    if (!done_) Flush();
  }
  // Ends the member's part in scans (scan thread, or before any scan): its read thread sends
  // what is queued, then answers `status`.
  void Finish(absl::Status status);
  // Records of the scanned range below `to` are gone from Kafka (`loss` says which): ends the
  // read with `loss`, or with skip_lost delivers what came before, adds a LOST gap and goes on
  // from `to`.
  void OnLost(int64_t to, const absl::Status& loss);
  // The scan met records damaged in Kafka's log, past what it handed this member (scan thread):
  // queues the entries assembled before them, then ends the read with `damage`.
  void OnDamaged(const absl::Status& damage);
  // Adds a gap after the entries taken so far and queues them (skip_lost).
  void AddGap(int64_t from, int64_t to, v1::Gap::Reason reason, std::string message);
  // ReadParams::for_pruner: the oldest incomplete entry at the read's end, as a gap.
  void ReportIncomplete();
  // Takes the member off its scan (scan thread, which must not touch it afterwards).
  void Detach();
  // For a scan that waits for this member's client (scan thread): waits at most `at_most` for
  // the read thread to drain the queue to half its bound; over_limit() is false once it is
  // within it.
  void WaitForRoom(Clock::duration at_most);

  // The read's thread: sends queued batches to the client until the member is done. When the
  // member was detached, `rejoin` is called once its queue is empty, to start a scan from
  // resume_at(). Returns the read's status.
  absl::Status Deliver(const std::function<void()>& rejoin);

  // One step of Deliver, for a thread that serves several members: sends one queued batch, or
  // rejoins a detached member (kProgress); kDone with the read's status in `status` once the
  // member is done and its queue empty; kWaiting when there is nothing to do now.
  enum class Step { kProgress, kWaiting, kDone };
  Step DeliverNext(const std::function<void()>& rejoin, absl::Status* status);
  // True once, when a following read has delivered everything up to the end it had when it
  // began (the read's thread asks when DeliverNext is kWaiting).
  bool TakeCaughtUp();

 private:
  // How often a member looks up its namespace's truncation point while it reads.
  static constexpr auto kMetaCheckInterval = std::chrono::milliseconds(100);

  // Moves assembled entries into the batch, queueing full batches; finishes at the limit. Stops
  // before an entry past a corrupt one.
  void TakeReady();
  // Remembers the corrupt entries this read should deliver (EntryAssembler::TakeCorrupt).
  void NoteCorrupt();
  // Before delivering entry `id`: with skip_lost, a gap for each corrupt entry below it (true);
  // without, false when there is one (the read must end there).
  bool PassCorruptBefore(int64_t id);
  // Once every entry before the first corrupt one was delivered: ends the read with DATA_LOSS
  // there, or with skip_lost adds its gap and goes on.
  void EndAtCorrupt();
  std::string CorruptMessage(int64_t id) const;
  // Queues the batch for the read's thread (scan thread); never waits.
  void Flush();
  // After a batch filled: a read of a ReadMany doubles its batch, up to batch_bytes, while its
  // call is within its budget and has room for the growth (QueueBudget::batch_growth). It
  // keeps what it grew until it ends. It began at half its share of the budget, which for
  // a thousand namespaces is 32 KiB: one big namespace among empty ones then sent 32 times the
  // messages of a Read, and took twice its time (docs/benchmarks/2026-12-02-where-time-goes.md).
  void GrowBatch();
  // Over the read's bound: its call's budget when it has one, else its own queue bound.
  bool FullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Read thread: drops the entries of `batch` below `cut`, the truncation point now (it may
  // have risen since they were queued). True when nothing is left to send.
  bool DropTruncated(int64_t cut, ReadBatch* batch) const;
  // How a read ends once its namespace's incarnation is deleted.
  absl::Status Deleted() const;

  ReadContext* const context_;
  const ReadParams params_;
  const std::shared_ptr<ReadSink> sink_;
  const NamespaceState ns_;
  const int64_t start_;
  const int64_t end_;
  const Clock::time_point stop_at_;
  const int64_t caught_up_at_;  // the end when the read began
  const size_t queue_limit_;    // read_queue_bytes; a ReadMany's reads go by call_budget
  const std::shared_ptr<DeliveryBell> bell_;

  // The scan thread's (one scan at a time; see the comment at the top).
  int64_t truncated_before_;
  int64_t next_offset_ = 0;  // records below were handed to this read already
  EntryAssembler assembler_;
  std::vector<AssembledEntry> ready_;  // may point into the record OnRecord is given
  // Corrupt entries of this read's range not yet passed: id -> when encoded.
  std::map<int64_t, int64_t> corrupt_;
  bool time_reached_;  // an entry at or after params_.start_time_ms was met (or there is none)
  ReadBatch batch_;
  size_t batch_bytes_ = 0;
  size_t batch_limit_;       // batch_bytes, or less for a share; grows (GrowBatch)
  size_t batch_growth_ = 0;  // taken from the call's budget (QueueBudget::batch_growth)
  uint64_t sent_ = 0;
  absl::Status last_error_;
  Clock::time_point last_meta_check_ = Clock::now();
  bool over_limit_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  // Batches with the memory they take (Flush).
  std::deque<std::pair<ReadBatch, size_t>> queue_ ABSL_GUARDED_BY(mu_);
  size_t queue_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool detached_ ABSL_GUARDED_BY(mu_) = false;
  bool caught_up_ ABSL_GUARDED_BY(mu_) = false;  // reached caught_up_at_, not yet reported
  bool caught_up_reported_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> done_{false};       // set under mu_, read without it
  std::atomic<bool> cancelled_{false};  // the client went away (read thread)
  // When the read thread last took a batch off the queue, or a batch went into an empty queue
  // (Clock ticks), for pulling().
  std::atomic<Clock::rep> last_progress_{Clock::now().time_since_epoch().count()};
};

}  // namespace wal
