#include "server/log/read_member.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace wal {

ReadMember::ReadMember(ReadContext* context, const ReadParams& params,
                       std::shared_ptr<ReadSink> sink, NamespaceState ns, int64_t start,
                       int64_t end, Clock::time_point stop_at, std::shared_ptr<DeliveryBell> bell)
    : context_(context),
      params_(params),
      sink_(std::move(sink)),
      ns_(std::move(ns)),
      start_(start),
      end_(params.follow ? std::numeric_limits<int64_t>::max() : end),
      stop_at_(stop_at),
      caught_up_at_(end),
      queue_limit_(params.queue_bytes != 0 ? params.queue_bytes
                                           : context->options.read_queue_bytes),
      bell_(std::move(bell)),
      truncated_before_(ns_.truncated_before),
      // A fence before the start is not in the scanned range; the table knows its epoch.
      assembler_(context->options.max_entry_bytes, ns_.FencedEpochBefore(start)),
      time_reached_(params.start_time_ms == 0),
      batch_limit_(params.batch_bytes != 0 ? params.batch_bytes : context->options.batch_bytes) {
  // OnRecord takes every entry Add hands out before the record goes (TakeReady).
  assembler_.LendRecords();
  assembler_.RaiseFloor(truncated_before_);
}

ReadMember::~ReadMember() {
  if (params_.call_budget) params_.call_budget->batch_growth -= batch_growth_;
}

void ReadMember::OnRecord(int64_t offset, uint64_t key, std::string_view value) {
  // Below next_offset_: seen already, delivered again after the scan went back for a joiner.
  if (done_ || offset < next_offset_) return;
  next_offset_ = offset + 1;
  if (key != params_.namespace_id || offset < start_ || offset >= end_) return;
  assembler_.Add(offset, value, &ready_);
  TakeReady();
  EndAtCorrupt();
  // Behind an incomplete split entry that may still complete (another writer's), entries
  // wait; past a bound the read ends rather than hold more, or give the entry up and lose it
  // if it does complete. A torn entry is given up within a minute (log/entry_assembler.h), so
  // reading again from it then goes on.
  if (assembler_.held_bytes() > 2 * context_->options.max_entry_bytes) {
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

void ReadMember::OnIdle(int64_t position, bool at_end_of_partition,
                        const absl::Status& kafka_error) {
  if (done_) return;
  if (!kafka_error.ok()) last_error_ = kafka_error;
  if (at_end_of_partition) last_error_ = absl::OkStatus();
  if (position >= end_) {
    if (params_.for_pruner) ReportIncomplete();
    assembler_.Flush(&ready_);
    TakeReady();
    EndAtCorrupt();
    Flush();
    Finish(absl::OkStatus());
    return;
  }
  Flush();
  if (params_.follow && position >= caught_up_at_) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!caught_up_ && !caught_up_reported_) {
      caught_up_ = true;
      if (bell_) bell_->Ring();
    }
  }
  if (cancelled_ || sink_->cancelled()) {
    Finish(absl::CancelledError("read cancelled"));
    return;
  }
  if (context_->stopping) {
    Finish(absl::UnavailableError(absl::StrCat("walserver is shutting down; read namespace ",
                                               params_.namespace_id, " again from entry ", position,
                                               " through another walserver or after the restart")));
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
        context_->truncated_before(params_.namespace_id, ns_.meta_offset);
    if (!truncated_before) {
      Finish(params_.slot_read ? absl::OkStatus() : Deleted());
      return;
    }
    truncated_before_ = std::max(truncated_before_, *truncated_before);
    assembler_.RaiseFloor(truncated_before_);
  }
}

void ReadMember::Finish(absl::Status status) {
  if (done_) return;
  context_->records_skipped += assembler_.skipped();
  context_->metrics->read_fenced_entries += assembler_.fenced();
  context_->metrics->read_duplicate_entries += assembler_.duplicates();
  context_->metrics->read_torn_entries += assembler_.torn();
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  status_ = std::move(status);
  cv_.notify_all();
  if (bell_) bell_->Ring();
}

bool ReadMember::FullLocked() const {
  // A read of a ReadMany may hold all of its call's budget while the others leave it room.
  const QueueBudget* budget = params_.call_budget.get();
  return budget != nullptr ? budget->queued > budget->limit : queue_bytes_ > queue_limit_;
}

void ReadMember::WaitForRoom(Clock::duration at_most) {
  std::unique_lock<std::mutex> lock(mu_);
  const QueueBudget* budget = params_.call_budget.get();
  cv_.wait_for(lock, at_most, [&] {
    if (cancelled_ || done_) return true;
    // With a budget, only this read's own takes wake this wait: it ends once its queue is
    // empty too, and the caller looks at the budget again.
    return budget != nullptr ? budget->queued <= budget->limit / 2 || queue_bytes_ == 0
                             : queue_bytes_ <= queue_limit_ / 2;
  });
  if (!FullLocked()) over_limit_ = false;
}

void ReadMember::Detach() {
  Flush();
  over_limit_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  detached_ = true;
  cv_.notify_all();
  if (bell_) bell_->Ring();
}

absl::Status ReadMember::Deliver(const std::function<void()>& rejoin) {
  absl::Status status;
  while (true) {
    const Step step = DeliverNext(rejoin, &status);
    if (step == Step::kDone) return status;
    if (step == Step::kWaiting) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty() || done_ || detached_; });
    }
  }
}

ReadMember::Step ReadMember::DeliverNext(const std::function<void()>& rejoin,
                                         absl::Status* status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!queue_.empty()) {
    ReadBatch batch = std::move(queue_.front().first);
    queue_bytes_ -= queue_.front().second;
    if (params_.call_budget) params_.call_budget->queued -= queue_.front().second;
    queue_.pop_front();
    last_progress_ = Clock::now().time_since_epoch().count();
    cv_.notify_all();  // a scan may wait for room (WaitForRoom)
    lock.unlock();
    // A truncation since the batch was read applies to it (not to the pruner's, ReadParams::
    // for_pruner). A deletion (also when the namespace was created again since) ends the read:
    // nothing more of its incarnation is delivered, and the client hears why rather than miss
    // the rest silently.
    const std::optional<int64_t> truncated_before =
        context_->truncated_before(params_.namespace_id, ns_.meta_offset);
    if (truncated_before && ((!params_.for_pruner && DropTruncated(*truncated_before, &batch)) ||
                             sink_->Send(std::move(batch)))) {
      return Step::kProgress;
    }
    lock.lock();
    cancelled_ = true;  // the scan drops the member at its next look
    cv_.notify_all();   // and a scan waiting for room (WaitForRoom) hears it now
    *status = truncated_before    ? absl::CancelledError("read cancelled")
              : params_.slot_read ? absl::OkStatus()
                                  : Deleted();
    return Step::kDone;
  }
  if (done_) {
    *status = status_;
    return Step::kDone;
  }
  if (!detached_) return Step::kWaiting;
  detached_ = false;
  lock.unlock();
  rejoin();
  return Step::kProgress;
}

bool ReadMember::TakeCaughtUp() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!caught_up_ || !queue_.empty()) return false;
  caught_up_ = false;
  caught_up_reported_ = true;
  return true;
}

void ReadMember::NoteCorrupt() {
  for (const EntryAssembler::Corrupt& bad : assembler_.TakeCorrupt()) {
    if (bad.entry_id < std::max(start_, truncated_before_)) continue;  // not this read's
    corrupt_.emplace(bad.entry_id, bad.created_ms);
  }
}

std::string ReadMember::CorruptMessage(int64_t id) const {
  return absl::StrCat("entry ", id, " of namespace ", params_.namespace_id, " in ", ns_.slot.topic,
                      "[", ns_.slot.partition,
                      "] is corrupt: its data does not match the checksum stored with it");
}

bool ReadMember::PassCorruptBefore(int64_t id) {
  while (!corrupt_.empty() && corrupt_.begin()->first < id) {
    const auto [bad, created_ms] = *corrupt_.begin();
    // In id order with the entries: before a read's start time (as the header, which the
    // checksum does not cover, says) it is not the read's; at or after it, it is the first
    // entry of the read like any other.
    if (!time_reached_) {
      if (created_ms < params_.start_time_ms) {
        corrupt_.erase(corrupt_.begin());
        continue;
      }
      time_reached_ = true;
    }
    if (!params_.skip_lost) return false;
    corrupt_.erase(corrupt_.begin());
    AddGap(bad, bad + 1, v1::Gap::UNDECODABLE, CorruptMessage(bad));
  }
  return true;
}

void ReadMember::EndAtCorrupt() {
  if (done_ || corrupt_.empty()) return;
  // Every entry before a corrupt one is delivered first: those still incomplete may complete.
  // Up to the oldest of them, the corrupt ones before the read's start time are dropped, and
  // the rest become gaps (skip_lost) or end the read at the first.
  const std::optional<int64_t> waiting = assembler_.oldest_incomplete();
  if (PassCorruptBefore(waiting.value_or(std::numeric_limits<int64_t>::max()))) return;
  const int64_t bad = corrupt_.begin()->first;
  Flush();
  Finish(absl::DataLossError(absl::StrCat(
      CorruptMessage(bad), ". The entries before it were delivered; a read from entry ", bad + 1,
      " goes on past it, and one with skip_lost reports it as a gap")));
}

void ReadMember::AddGap(int64_t from, int64_t to, v1::Gap::Reason reason, std::string message) {
  if (done_ || from >= to) return;
  v1::Gap* gap = batch_.AddGap();
  gap->set_namespace_id(params_.namespace_id);
  gap->set_from_entry_id(static_cast<uint64_t>(from));
  gap->set_to_entry_id(static_cast<uint64_t>(to));
  gap->set_reason(reason);
  gap->set_message(std::move(message));
  context_->metrics->read_gaps += 1;
  Flush();  // the entries after the gap go in later messages
}

void ReadMember::ReportIncomplete() {
  const std::optional<int64_t> oldest = assembler_.oldest_incomplete();
  if (!oldest) return;
  // Not AddGap: no gap the client sees, so not counted as one.
  v1::Gap* gap = batch_.AddGap();
  gap->set_namespace_id(params_.namespace_id);
  gap->set_from_entry_id(static_cast<uint64_t>(*oldest));
  gap->set_to_entry_id(static_cast<uint64_t>(*oldest + 1));
  gap->set_message("incomplete at the read's end");
}

void ReadMember::OnLost(int64_t to, const absl::Status& loss) {
  if (done_) return;
  if (!params_.skip_lost) {
    Finish(loss);
    return;
  }
  int64_t from = std::max(resume_at(), truncated_before_);
  // Entries begun before the gap can never complete: the gap starts at the first of them. The
  // complete ones before it go first.
  if (std::optional<int64_t> begun = assembler_.oldest_incomplete(); begun && *begun < from) {
    from = *begun;
  }
  assembler_.Flush(&ready_);
  TakeReady();
  EndAtCorrupt();
  AddGap(from, to, v1::Gap::LOST, std::string(loss.message()));
  next_offset_ = std::max(next_offset_, to);
}

void ReadMember::OnDamaged(const absl::Status& damage) {
  if (done_) return;
  // An entry begun before the damage can never complete; the complete ones behind it go.
  const std::optional<int64_t> begun = assembler_.oldest_incomplete();
  assembler_.Flush(&ready_);
  TakeReady();
  EndAtCorrupt();
  Flush();
  if (begun) {
    Finish(absl::DataLossError(
        absl::StrCat(damage.message(), "; entry ", *begun, ", begun before it, is lost with it")));
  } else {
    Finish(damage);
  }
}

void ReadMember::TakeReady() {
  NoteCorrupt();
  for (AssembledEntry& e : ready_) {
    if (done_) break;
    if (static_cast<int64_t>(e.entry_id) < std::max(start_, truncated_before_)) continue;
    if (!PassCorruptBefore(static_cast<int64_t>(e.entry_id))) break;  // EndAtCorrupt ends it
    // A read from a time starts at the first entry encoded at or after it; every entry after
    // that one follows, whatever the clocks of other writers said.
    if (!time_reached_) {
      if (e.created_ms < params_.start_time_ms) continue;
      time_reached_ = true;
    }
    const std::string_view data = e.bytes();
    batch_.AddEntry(ReadEntry{params_.namespace_id, e.entry_id, data, e.stamp.epoch,
                              e.stamp.sequence, e.crc32c, e.stamp.writer_id});
    batch_bytes_ += data.size();
    context_->metrics->read_bytes += data.size();
    ++context_->metrics->read_entries;
    ++sent_;
    if (params_.limit != 0 && sent_ >= params_.limit) {
      Flush();
      Finish(absl::OkStatus());
    } else if (batch_bytes_ >= batch_limit_) {
      Flush();
      GrowBatch();
    }
  }
  ready_.clear();
}

void ReadMember::Flush() {
  if (batch_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  // A client that had nothing to take is not a stalled one: its time starts now.
  if (queue_.empty()) last_progress_ = Clock::now().time_since_epoch().count();
  // Counted as the memory it takes (ReadBatch::memory_bytes), more than its entries' bytes: the
  // queue's bound is one of memory.
  const size_t held = batch_.memory_bytes();
  queue_.emplace_back(std::move(batch_), held);
  queue_bytes_ += held;
  if (params_.call_budget) params_.call_budget->queued += held;
  if (FullLocked()) over_limit_ = true;
  batch_ = ReadBatch();
  batch_bytes_ = 0;
  cv_.notify_all();
  if (bell_) bell_->Ring();
}

void ReadMember::GrowBatch() {
  QueueBudget* budget = params_.call_budget.get();
  const size_t most = context_->options.batch_bytes;
  if (budget == nullptr || batch_limit_ >= most || over_limit_) return;
  const size_t more = std::min(batch_limit_, most - batch_limit_);
  size_t grown = budget->batch_growth.load();
  do {
    if (grown + more > budget->limit / 4) return;
  } while (!budget->batch_growth.compare_exchange_weak(grown, grown + more));
  batch_limit_ += more;
  batch_growth_ += more;
}

absl::Status ReadMember::Deleted() const {
  return absl::NotFoundError(
      absl::StrCat("namespace ", params_.namespace_id,
                   " was deleted (a namespace created again with its id is a new one: read it "
                   "anew)"));
}

bool ReadMember::DropTruncated(int64_t cut, ReadBatch* batch) const {
  batch->DropBelow(cut);
  return batch->empty();
}

}  // namespace wal
