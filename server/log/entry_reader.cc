#include "server/log/entry_reader.h"

#include <deque>
#include <functional>
#include <limits>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "server/common/deadline.h"
#include "server/common/namespace_key.h"
#include "server/kafka/admin.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"
#include "server/kafka/errors.h"
#include "server/log/entry_assembler.h"
#include "spdlog/spdlog.h"

namespace wal {

EntryReader::EntryReader(KafkaProperties properties, ReaderOptions options, MetaStore* meta,
                         Metrics* metrics, std::string name)
    : properties_(std::move(properties)),
      options_(options),
      meta_(meta),
      metrics_(metrics),
      name_(std::move(name)) {}

EntryReader::~EntryReader() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return running_ == 0 && scans_running_ == 0; });
  idle_consumers_.clear();
}

absl::Status EntryReader::Start(ReadParams params, std::shared_ptr<ReadSink> sink) {
  if (stopping_) return absl::UnavailableError("walserver is shutting down");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ >= options_.max_concurrent_reads) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many concurrent reads (", options_.max_concurrent_reads, "); retry later"));
    }
    ++running_;
  }
  std::thread([this, params, sink = std::move(sink)] {
    ++metrics_->reads_in_progress;
    absl::Status status = Run(params, sink);
    --metrics_->reads_in_progress;
    sink->Finish(std::move(status));
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) idle_cv_.notify_all();
  }).detach();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Consumer>> EntryReader::AcquireConsumer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_consumers_.empty()) {
      auto consumer = std::move(idle_consumers_.back());
      idle_consumers_.pop_back();
      return consumer;
    }
  }
  return Consumer::Create(properties_, absl::StrCat(name_, "-reader-", consumers_made_++));
}

void EntryReader::ReleaseConsumer(std::unique_ptr<Consumer> consumer) {
  if (!consumer->Unassign().ok()) return;  // a consumer in doubt is not reused
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_consumers_.size() < options_.max_idle_consumers) {
    idle_consumers_.push_back(std::move(consumer));
  }
}

// One read, as a member of a slot scan. The scan thread feeds it records and queues the batches
// it makes; the read's own thread (Deliver) sends them to the client. The scan never waits on a
// client: a member whose queue is full is detached (Detach), and its read thread, once the queue
// drained, starts a scan of its own from where the member stands.
//
// Ownership: the assembler, the batch being filled and the offsets are touched by one scan
// thread at a time (the one whose members_ holds the member; the hand-off goes through mu_).
// The queue and the flags under mu_ are shared with the read thread.
class EntryReader::Member {
 public:
  Member(EntryReader* reader, const ReadParams& params, std::shared_ptr<ReadSink> sink,
         NamespaceState ns, int64_t start, int64_t end, Clock::time_point stop_at)
      : reader_(reader),
        params_(params),
        sink_(std::move(sink)),
        ns_(std::move(ns)),
        start_(start),
        end_(params.follow ? std::numeric_limits<int64_t>::max() : end),
        stop_at_(stop_at),
        truncated_before_(ns_.truncated_before),
        // A fence before the start is not in the scanned range; the table knows its epoch.
        assembler_(reader->options_.max_entry_bytes, ns_.FencedEpochBefore(start)) {}

  uint64_t namespace_id() const { return params_.namespace_id; }
  const Slot& slot() const { return ns_.slot; }
  // Where a scan must start for this member: its start, or past what it was handed already.
  int64_t resume_at() const { return std::max(start_, next_offset_); }
  int64_t end() const { return end_; }
  bool done() const { return done_; }
  // The queue is over its bound: the scan should detach this member (scan thread).
  bool over_limit() const { return over_limit_; }

  // A record of the slot at `offset` (scan thread).
  void OnRecord(int64_t offset, uint64_t key, std::string_view value) {
    // Below next_offset_: seen already, delivered again after the scan went back for a joiner.
    if (done_ || offset < next_offset_) return;
    next_offset_ = offset + 1;
    if (key != params_.namespace_id || offset < start_ || offset >= end_) return;
    assembler_.Add(offset, value, &ready_);
    TakeReady();
    // Behind an incomplete split entry that may still complete (another writer's), entries
    // wait; past a bound the read ends rather than hold more, or give the entry up and lose it
    // if it does complete. A torn entry is given up within a minute (log/entry_assembler.h), so
    // reading again from it then goes on.
    if (assembler_.held_bytes() > 2 * reader_->options_.max_entry_bytes) {
      const int64_t resume = assembler_.oldest_incomplete().value_or(offset);
      Flush();
      Finish(absl::UnavailableError(
          absl::StrCat("entry ", resume, " of namespace ", params_.namespace_id,
                       " is incomplete and ", assembler_.held_bytes(),
                       " bytes of entries wait behind it; it may be torn by a writer "
                       "that failed: read again from entry ",
                       resume, " in a minute")));
    }
  }

  // The scan is at `position` and has nothing more just now (scan thread): queue what is
  // batched, finish when the range is done, cancelled or out of time.
  void OnIdle(int64_t position, bool at_end_of_partition, const absl::Status& kafka_error) {
    if (done_) return;
    if (!kafka_error.ok()) last_error_ = kafka_error;
    if (at_end_of_partition) last_error_ = absl::OkStatus();
    if (position >= end_) {
      assembler_.Flush(&ready_);
      TakeReady();
      Flush();
      Finish(absl::OkStatus());
      return;
    }
    Flush();
    if (cancelled_ || sink_->cancelled()) {
      Finish(absl::CancelledError("read cancelled"));
      return;
    }
    if (reader_->stopping_) {
      Finish(absl::UnavailableError(absl::StrCat(
          "walserver is shutting down; read namespace ", params_.namespace_id, " again from entry ",
          position, " through another walserver or after the restart")));
      return;
    }
    if (Clock::now() >= stop_at_) {
      Finish(!last_error_.ok() ? last_error_
                               : absl::DeadlineExceededError(
                                     absl::StrCat("read of namespace ", params_.namespace_id,
                                                  " reached its deadline at entry ", position)));
      return;
    }
    // A truncation or a deletion since the read began applies from here on (a follower deep in
    // its backlog must not go on delivering what was truncated).
    if (Clock::now() - last_meta_check_ >= kMetaCheckInterval) {
      last_meta_check_ = Clock::now();
      std::optional<int64_t> truncated_before =
          reader_->meta_->TruncatedBefore(params_.namespace_id);
      if (!truncated_before) {
        Finish(
            absl::NotFoundError(absl::StrCat("namespace ", params_.namespace_id, " was deleted")));
        return;
      }
      truncated_before_ = std::max(truncated_before_, *truncated_before);
    }
  }

  // Ends the member's part in scans (scan thread, or Run before any scan): its read thread
  // sends what is queued, then answers `status`.
  void Finish(absl::Status status) {
    if (done_) return;
    reader_->records_skipped_ += assembler_.skipped();
    reader_->metrics_->read_fenced_entries += assembler_.fenced();
    reader_->metrics_->read_duplicate_entries += assembler_.duplicates();
    reader_->metrics_->read_torn_entries += assembler_.torn();
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    status_ = std::move(status);
    cv_.notify_all();
  }

  // Takes the member off its scan (scan thread, which must not touch it afterwards).
  void Detach() {
    Flush();
    over_limit_ = false;
    std::lock_guard<std::mutex> lock(mu_);
    detached_ = true;
    cv_.notify_all();
  }

  // The read's thread: sends queued batches to the client until the member is done. When the
  // member was detached, `rejoin` is called once its queue is empty, to start a scan from
  // resume_at(). Returns the read's status.
  absl::Status Deliver(const std::function<void()>& rejoin) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return !queue_.empty() || done_ || detached_; });
      if (!queue_.empty()) {
        v1::ReadResponse batch = std::move(queue_.front().first);
        queue_bytes_ -= queue_.front().second;
        queue_.pop_front();
        lock.unlock();
        const bool sent = DropTruncated(&batch) || sink_->Send(std::move(batch));
        lock.lock();
        if (!sent) {
          cancelled_ = true;  // the scan drops the member at its next look
          return absl::CancelledError("read cancelled");
        }
        continue;
      }
      if (done_) return status_;
      detached_ = false;
      lock.unlock();
      rejoin();
      lock.lock();
    }
  }

 private:
  static constexpr auto kMetaCheckInterval = std::chrono::milliseconds(100);

  // Moves assembled entries into the batch, queueing full batches; finishes at the limit.
  void TakeReady() {
    for (AssembledEntry& e : ready_) {
      if (done_) break;
      if (static_cast<int64_t>(e.entry_id) < std::max(start_, truncated_before_)) continue;
      v1::Entry* out = batch_.add_entries();
      out->set_namespace_id(params_.namespace_id);
      out->set_entry_id(e.entry_id);
      out->set_epoch(e.stamp.epoch);
      out->set_sequence(e.stamp.sequence);
      batch_bytes_ += e.data.size();
      reader_->metrics_->read_bytes += e.data.size();
      ++reader_->metrics_->read_entries;
      *out->mutable_data() = std::move(e.data);
      ++sent_;
      if (params_.limit != 0 && sent_ >= params_.limit) {
        Flush();
        Finish(absl::OkStatus());
      } else if (batch_bytes_ >= reader_->options_.batch_bytes) {
        Flush();
      }
    }
    ready_.clear();
  }

  // Queues the batch for the read's thread (scan thread); never waits.
  void Flush() {
    if (batch_.entries_size() == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(batch_), batch_bytes_);
    queue_bytes_ += batch_bytes_;
    if (queue_bytes_ > reader_->options_.read_queue_bytes) over_limit_ = true;
    batch_.Clear();
    batch_bytes_ = 0;
    cv_.notify_all();
  }

  // Read thread: drops the entries of `batch` that a truncation since they were queued removed.
  // True when nothing is left to send.
  bool DropTruncated(v1::ReadResponse* batch) const {
    const std::optional<int64_t> truncated_before =
        reader_->meta_->TruncatedBefore(params_.namespace_id);
    const int64_t cut = truncated_before.value_or(std::numeric_limits<int64_t>::max());
    auto* entries = batch->mutable_entries();
    if (entries->empty() || static_cast<int64_t>(entries->begin()->entry_id()) >= cut) {
      return entries->empty();
    }
    int keep_from = 0;
    while (keep_from < entries->size() &&
           static_cast<int64_t>(entries->Get(keep_from).entry_id()) < cut) {
      ++keep_from;
    }
    entries->DeleteSubrange(0, keep_from);
    return entries->empty();
  }

  EntryReader* const reader_;
  const ReadParams params_;
  const std::shared_ptr<ReadSink> sink_;
  const NamespaceState ns_;
  const int64_t start_;
  const int64_t end_;
  const Clock::time_point stop_at_;

  // The scan thread's (one scan at a time; see the class comment).
  int64_t truncated_before_;
  int64_t next_offset_ = 0;  // records below were handed to this read already
  EntryAssembler assembler_;
  std::vector<AssembledEntry> ready_;
  v1::ReadResponse batch_;
  size_t batch_bytes_ = 0;
  uint64_t sent_ = 0;
  absl::Status last_error_;
  Clock::time_point last_meta_check_ = Clock::now();
  bool over_limit_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<v1::ReadResponse, size_t>> queue_;  // batches with their entry bytes
  size_t queue_bytes_ = 0;
  bool detached_ = false;
  std::atomic<bool> done_{false};
  std::atomic<bool> cancelled_{false};  // the client went away (read thread)
  absl::Status status_;
};

// One consumer scanning one slot for all the members that joined before it passed their start.
class EntryReader::SlotScan : public std::enable_shared_from_this<SlotScan> {
 public:
  SlotScan(EntryReader* reader, Slot slot) : reader_(reader), slot_(std::move(slot)) {}

  // False when the scan is ending, or has passed `member`'s start too far to go back for it.
  bool TryJoin(const std::shared_ptr<Member>& member) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    if (position_ < 0 || position_ <= member->resume_at()) {
      pending_.push_back(member);
      return true;
    }
    // Behind the scan: going back costs re-reading what lies between, once for all the reads
    // waiting for it; a second scan would read the whole slot again alongside. Worth it while
    // the scan is young (reads of a datanode opening its regions arrive over 100-250 ms).
    if (member->resume_at() < first_start_ || scanned_bytes_ > kMaxRewindBytes) return false;
    rewind_to_ = std::min(rewind_to_, member->resume_at());
    rewinding_.push_back(member);
    return true;
  }

  void Run() {
    // Reads of one slot tend to arrive together (a datanode opening its regions): give them a
    // moment to join before the scan starts; later ones make it go back (TryJoin).
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    absl::Status status = Scan();
    // Whatever is left ends with the scan's error.
    std::vector<std::shared_ptr<Member>> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      left.swap(pending_);
      left.insert(left.end(), rewinding_.begin(), rewinding_.end());
      rewinding_.clear();
    }
    left.insert(left.end(), members_.begin(), members_.end());
    for (auto& m : left) {
      if (!m->done())
        m->Finish(status.ok() ? absl::InternalError("read scan ended early") : status);
    }
    reader_->ScanEnded(this);
  }

 private:
  // Moves newly joined members in; false when no member is left (and no more may join). Sets
  // `*rewind_to` when members joined behind `position` (the scan must go back there first).
  bool Admit(int64_t position, int64_t* rewind_to) {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t new_position = position;
    if (!rewinding_.empty()) {
      new_position = *rewind_to = rewind_to_;
      rewind_to_ = std::numeric_limits<int64_t>::max();
      for (auto& m : rewinding_) members_.push_back(std::move(m));
      rewinding_.clear();
      changed_ = true;
    }
    if (!pending_.empty()) changed_ = true;
    for (auto& m : pending_) members_.push_back(std::move(m));
    pending_.clear();
    if (changed_) Reindex();
    if (members_.empty()) {
      closed_ = true;
      return false;
    }
    position_ = new_position;
    return true;
  }

  static constexpr int64_t kMaxRewindBytes = 256 << 20;
  // Bounds a watermark query the scan makes for its members (each ends at its own deadline).

  // After members came or went: drops finished ones and indexes the rest by namespace, so that
  // a record costs a lookup, not a call per member (100 reads of a slot share its scan).
  void Reindex() {
    members_.erase(std::remove_if(members_.begin(), members_.end(),
                                  [](const std::shared_ptr<Member>& m) { return m->done(); }),
                   members_.end());
    by_namespace_.clear();
    min_end_ = std::numeric_limits<int64_t>::max();
    max_end_ = 0;
    bounded_end_ = 0;
    for (const auto& m : members_) {
      by_namespace_[m->namespace_id()].push_back(m.get());
      min_end_ = std::min(min_end_, m->end());
      max_end_ = std::max(max_end_, m->end());
      // A following read's end is open; the others end where the slot ended when they began.
      if (m->end() != std::numeric_limits<int64_t>::max()) {
        bounded_end_ = std::max(bounded_end_, m->end());
      }
    }
    changed_ = false;
  }

  // Every member hears where the scan is (see Member::OnIdle); some may finish.
  void AllIdle(int64_t position, bool at_end_of_partition, const absl::Status& status) {
    for (auto& m : members_) m->OnIdle(position, at_end_of_partition, status);
    changed_ = true;
    DetachOverLimit();
  }

  // Members whose client fell behind (queue full) leave the scan, so that it never waits on
  // one client; each carries on with a scan of its own (Member::Deliver).
  void DetachOverLimit() {
    bool detached = false;
    for (auto it = members_.begin(); it != members_.end();) {
      if ((*it)->done() || !(*it)->over_limit()) {
        ++it;
        continue;
      }
      std::shared_ptr<Member> m = std::move(*it);
      it = members_.erase(it);
      m->Detach();
      ++reader_->metrics_->read_scan_detaches;
      detached = true;
    }
    if (detached) Reindex();  // by_namespace_ points at members
  }

  // Records [position, low) of the slot are gone from Kafka and nobody pruned them: the members
  // that still need some of them end with DATA_LOSS; the others go on.
  void LoseRange(int64_t position, int64_t low, const absl::Status& loss) {
    for (auto& m : members_) {
      if (!m->done() && m->resume_at() < low && position < m->end()) m->Finish(loss);
    }
    changed_ = true;
  }

  absl::Status Scan() {
    int64_t start;
    {
      std::lock_guard<std::mutex> lock(mu_);
      start = pending_.front()->resume_at();
      for (auto& m : pending_) start = std::min(start, m->resume_at());
      position_ = first_start_ = start;
    }
    auto acquired = reader_->AcquireConsumer();
    if (!acquired.ok()) return acquired.status();
    std::unique_ptr<Consumer> consumer = std::move(*acquired);
    struct ReturnConsumer {
      EntryReader* reader;
      std::unique_ptr<Consumer>& consumer;
      ~ReturnConsumer() { reader->ReleaseConsumer(std::move(consumer)); }
    } return_consumer{reader_, consumer};
    if (absl::Status s = consumer->Assign(slot_.topic, slot_.partition, start); !s.ok()) return s;

    int64_t position = start;
    int64_t furthest = start;  // records below were scanned at least once
    auto last_check = Clock::now();
    auto last_refetch = Clock::time_point();
    int64_t rewind_to = -1;
    while (Admit(position, &rewind_to)) {
      if (rewind_to >= 0) {
        if (absl::Status s = consumer->Seek(slot_.topic, slot_.partition, rewind_to); !s.ok()) {
          return s;
        }
        position = rewind_to;
        rewind_to = -1;
        ++reader_->metrics_->read_scan_rewinds;
      }
      if (position >= max_end_) {
        AllIdle(position, false, absl::OkStatus());
        continue;
      }
      // Where records are known to exist: a short wait, then restart fetching at `position`. When
      // the scan falls behind the fetcher, librdkafka 2.0.2 fills its queue
      // (queued.max.messages.kbytes) and then fetches nothing for a fixed second, even after the
      // queue drained (fetch.queue.backoff.ms came in 2.1). A scan with many members stalled
      // ~1 s per 16 MiB that way; seeking to where it is starts a fetch at once.
      Message msg = consumer->Poll(position < bounded_end_ ? 20 : 100);
      if (!msg) {
        AllIdle(position, false, absl::OkStatus());
        if (position < bounded_end_ &&
            Clock::now() - last_refetch >= std::chrono::milliseconds(100)) {
          last_refetch = Clock::now();
          if (absl::Status s = consumer->Seek(slot_.topic, slot_.partition, position); !s.ok()) {
            return s;
          }
          ++reader_->metrics_->read_scan_refetches;
        }
        continue;
      }
      if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        position = std::max(position, msg->offset);
        AllIdle(position, true, absl::OkStatus());
        continue;
      }
      if (msg->err) {
        absl::Status status = KafkaErrorToStatus(
            msg->err, absl::StrCat("reading ", slot_.topic, "[", slot_.partition, "]"));
        if (absl::IsDataLoss(status)) {
          // Pruned under the scan (entries truncated meanwhile), or really lost? Only the
          // members that needed the missing records end; the scan goes on past them.
          const auto deadline = Clock::now() + kKafkaRequestTimeout;
          auto marks = QueryWatermarks(reader_->meta_->watermarks_client(), slot_.topic,
                                       slot_.partition, MillisLeft(deadline, INT32_MAX));
          if (!marks.ok()) {
            AllIdle(position, false, marks.status());
            continue;
          }
          if (absl::Status s = reader_->PrunedOrLost(slot_, position, marks->low, deadline);
              absl::IsDataLoss(s)) {
            LoseRange(position, marks->low, s);
          } else if (!s.ok()) {
            AllIdle(position, false, s);
            continue;
          }
          position = std::max(position, marks->low);
          // Assigned again, not sought: after an out-of-range error the partition's fetcher is
          // stopped, and a seek answers _STATE.
          if (absl::Status s = consumer->Assign(slot_.topic, slot_.partition, position); !s.ok()) {
            return s;
          }
          continue;
        }
        if (!absl::IsUnavailable(status)) return status;
        // librdkafka retries on its own; each read gives up at its deadline.
        AllIdle(position, false, status);
        continue;
      }
      position = msg->offset + 1;
      {
        // Later joiners must start after this record; those that joined while it was being
        // fetched (their start is at most its offset) are admitted now, so that they get it.
        std::lock_guard<std::mutex> lock(mu_);
        position_ = position;
        if (position > furthest) {
          furthest = position;
          scanned_bytes_ += static_cast<int64_t>(msg->len);
        }
        if (!pending_.empty()) {
          for (auto& m : pending_) members_.push_back(std::move(m));
          pending_.clear();
          Reindex();
        }
      }
      const std::optional<uint64_t> key = DecodeKey(msg->key, msg->key_len);
      if (!key) {
        ++reader_->records_skipped_;  // not written by walserver
        continue;
      }
      const std::string_view value(static_cast<const char*>(msg->payload), msg->len);
      if (auto it = by_namespace_.find(*key); it != by_namespace_.end()) {
        for (Member* m : it->second) {
          m->OnRecord(msg->offset, *key, value);
          if (m->done()) changed_ = true;  // reached its limit
        }
        DetachOverLimit();
      }
      // Members at their end finish now; the others hear of cancellation and deadlines, and
      // send what they have, every 100 ms even while records keep coming.
      const bool check_all = Clock::now() - last_check > std::chrono::milliseconds(100);
      if (check_all) last_check = Clock::now();
      if (check_all || position >= min_end_) {
        for (auto& m : members_) {
          if (check_all || position >= m->end()) m->OnIdle(position, false, absl::OkStatus());
        }
        changed_ = true;
        DetachOverLimit();
      }
    }
    return absl::OkStatus();
  }

  EntryReader* const reader_;
  const Slot slot_;
  // The scan thread's (it admits under mu_).
  std::vector<std::shared_ptr<Member>> members_;
  std::unordered_map<uint64_t, std::vector<Member*>> by_namespace_;
  int64_t min_end_ = 0;
  int64_t max_end_ = 0;
  // Records below exist: the furthest end of a read that is not following.
  int64_t bounded_end_ = 0;
  bool changed_ = true;  // members_ may hold finished members; by_namespace_ is stale

  std::mutex mu_;
  std::vector<std::shared_ptr<Member>> pending_;
  // Joined behind the scan's position: admitted when the scan goes back to rewind_to_.
  std::vector<std::shared_ptr<Member>> rewinding_;
  int64_t rewind_to_ = std::numeric_limits<int64_t>::max();
  int64_t position_ = -1;  // next offset the scan will hand out; -1 before it starts
  int64_t first_start_ = 0;
  int64_t scanned_bytes_ = 0;  // bytes of the records from first_start_ to the furthest position
  bool closed_ = false;
};

void EntryReader::Join(const std::shared_ptr<Member>& member, bool shared) {
  std::lock_guard<std::mutex> lock(mu_);
  const Slot& key = member->slot();
  auto it = scans_.find(key);
  if (shared && it != scans_.end() && it->second->TryJoin(member)) return;
  // No scan of the slot, or it is past this read's start: a new one (the old one, if any,
  // finishes on its own; only the newest is joinable). A read that fell behind its scan gets
  // one nobody else joins, so that it cannot hold others up again.
  auto scan = std::make_shared<SlotScan>(this, member->slot());
  scan->TryJoin(member);
  if (shared) scans_[key] = scan;
  ++scans_running_;
  ++metrics_->read_scans;
  std::thread([scan] { scan->Run(); }).detach();
}

void EntryReader::ScanEnded(SlotScan* scan) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = scans_.begin(); it != scans_.end(); ++it) {
    if (it->second.get() == scan) {
      scans_.erase(it);
      break;
    }
  }
  if (--scans_running_ == 0) idle_cv_.notify_all();
}

absl::Status EntryReader::PrunedOrLost(const Slot& slot, int64_t from, int64_t low,
                                       Clock::time_point deadline) {
  // The pruner records its point before deleting; another server's record may not be read yet.
  if (low > meta_->PrunedBefore(slot)) {
    if (absl::Status s = meta_->CatchUp(Within(deadline, kKafkaRequestTimeout)); !s.ok()) {
      return s;
    }
  }
  if (low <= meta_->PrunedBefore(slot)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "records ", from, " to ", low - 1, " of ", slot.topic, "[", slot.partition,
      "] are gone from Kafka although no namespace truncated them (retention set on the topic?); "
      "walserver pruned only below ",
      meta_->PrunedBefore(slot)));
}

absl::Status EntryReader::Run(const ReadParams& params, const std::shared_ptr<ReadSink>& sink) {
  // Stop a little before the caller's deadline, so the caller learns why.
  const auto stop_at = AnswerBy(params.deadline);

  // A read sees every change to the namespace made before it began, through any server
  // (creation, truncation, a new epoch): one round trip to the metadata topic. It gets half the
  // time left at most (librdkafka may overrun a query's timeout), so that with Kafka down the
  // caller still hears UNAVAILABLE before its deadline.
  const auto now = Clock::now();
  const auto catch_up_by =
      stop_at == Clock::time_point::max()
          ? now + kKafkaRequestTimeout
          : now + std::min<Clock::duration>((stop_at - now) / 2, kKafkaRequestTimeout);
  if (absl::Status s = meta_->CatchUp(catch_up_by); !s.ok()) return s;
  std::optional<NamespaceState> ns = meta_->Get(params.namespace_id);
  if (!ns) {
    return absl::NotFoundError(absl::StrCat("namespace ", params.namespace_id,
                                            " not found; create it with CreateNamespace"));
  }

  // The end of the log as seen now bounds a read without follow.
  absl::StatusOr<Watermarks> marks =
      QueryWatermarks(meta_->watermarks_client(), ns->slot.topic, ns->slot.partition,
                      std::max(1, MillisLeft(stop_at)));
  if (!marks.ok()) return marks.status();
  const int64_t end = marks->high;
  const int64_t first = ns->first_entry_id();
  if (params.start_entry_id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::OutOfRangeError(absl::StrCat("start_entry_id ", params.start_entry_id,
                                              " is past the end ", end, " of namespace ",
                                              params.namespace_id));
  }
  const int64_t start =
      params.start_entry_id == 0 ? first : static_cast<int64_t>(params.start_entry_id);
  if (start < first) {
    return absl::OutOfRangeError(absl::StrCat("start_entry_id ", start, " is below first_entry_id ",
                                              first, " of namespace ", params.namespace_id,
                                              " (truncated); use 0 to read from the first entry"));
  }
  if (start > end) {
    return absl::OutOfRangeError(absl::StrCat("start_entry_id ", start, " is past the end ", end,
                                              " of namespace ", params.namespace_id));
  }
  int64_t scan_from = start;
  if (start < marks->low) {
    if (absl::Status s = PrunedOrLost(ns->slot, start, marks->low, stop_at); !s.ok()) return s;
    // Pruned on purpose: the namespace has no entry below the new low watermark.
    scan_from = marks->low;
  }
  if (start == end && !params.follow) return absl::OkStatus();

  auto member = std::make_shared<Member>(this, params, sink, *ns, scan_from, end, stop_at);
  Join(member, /*shared=*/true);
  return member->Deliver([this, &member] { Join(member, /*shared=*/false); });
}

}  // namespace wal
