#include "server/log/slot_scan.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/namespace_key.h"
#include "server/kafka/errors.h"

namespace wal {

bool SlotScan::TryJoin(const std::shared_ptr<ReadMember>& member) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return false;
  if (position_ < 0 || position_ <= member->resume_at()) {
    pending_.push_back(member);
    return true;
  }
  // Behind the scan: going back costs re-reading what lies between, once for all the reads
  // waiting for it; a second scan would read the whole slot again alongside. Worth it while the
  // scan is young (reads of a datanode opening its regions arrive over 100-250 ms).
  if (member->resume_at() < first_start_ || scanned_bytes_ > kMaxRewindBytes) return false;
  rewind_to_ = std::min(rewind_to_, member->resume_at());
  rewinding_.push_back(member);
  return true;
}

void SlotScan::Run() {
  std::this_thread::sleep_for(kJoinWindow);
  absl::Status status = Scan();
  RecordCovered();
  if (consumer_) host_->ReleaseConsumer(std::move(consumer_), fetch_size_, FetchMayWait());
  // Whatever is left ends with the scan's error.
  std::vector<std::shared_ptr<ReadMember>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    left.swap(pending_);
    left.insert(left.end(), rewinding_.begin(), rewinding_.end());
    rewinding_.clear();
  }
  left.insert(left.end(), members_.begin(), members_.end());
  for (auto& m : left) {
    if (!m->done()) m->Finish(status.ok() ? absl::InternalError("read scan ended early") : status);
  }
  host_->ScanEnded(this);
}

absl::Status SlotScan::Scan() {
  if (absl::Status s = Start(); !s.ok()) return s;
  int64_t rewind_to = -1;
  while (Admit(&rewind_to)) {
    if (rewind_to >= 0) {
      if (absl::Status s = Rewind(rewind_to); !s.ok()) return s;
      rewind_to = -1;
    }
    if (index_ != nullptr && next_ >= recheck_at_) {
      if (absl::Status s = SkipAhead(); !s.ok()) return s;
      continue;  // members may have finished
    }
    if (next_ >= max_end_) {  // every member is at its end or waits for new records
      AllIdle(false, absl::OkStatus());
      continue;
    }
    // A follower gets an entry as soon as its records are in, not when the next fetch comes
    // back empty (up to fetch.wait.max.ms later) or the poll times out.
    const auto wait = !unsent_.empty()       ? std::chrono::milliseconds(0)
                      : next_ < bounded_end_ ? kPollWhileBehind
                                             : kPollAtEnd;
    Message msg = consumer_->Poll(static_cast<int>(wait.count()));
    absl::Status status;
    if (!msg && !unsent_.empty()) {
      SendUnsent();  // nothing more at hand
    } else if (!msg) {
      // Nothing fetched yet. (A scan behind its fetcher that filled librdkafka's queue gets more
      // after fetch.queue.backoff.ms, which Consumer sets low.)
      AllIdle(false, absl::OkStatus());
    } else if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      OnEndOfPartition(msg->offset);
    } else if (msg->err) {
      status = OnKafkaError(msg->err, msg->offset);
    } else {
      OnRecord(*msg);
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status SlotScan::Start() {
  // Before the index is asked where to start: what it answers is of this log or a later one.
  if (index_ != nullptr) log_changes_ = index_->log_changes();
  int64_t start;
  {
    std::lock_guard<std::mutex> lock(mu_);
    start = FirstNeeded(pending_);
    position_ = first_start_ = start;
  }
  auto acquired = host_->AcquireConsumer(fetch_size_);
  if (!acquired.ok()) return acquired.status();
  consumer_ = std::move(*acquired);
  next_ = furthest_ = covered_from_ = start;
  recheck_at_ = no_seek_before_ = start + 1;  // the fetcher starts with the first record
  return consumer_->Assign(slot_.topic, slot_.partition, start);
}

bool SlotScan::Admit(int64_t* rewind_to) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t new_position = next_;
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

absl::Status SlotScan::Rewind(int64_t to) {
  // A consumer assigned just now (a change of fetch size at a skip) answers a seek with _STATE
  // until its fetcher started; it is assigned again instead.
  const bool just_assigned = next_ < no_seek_before_;
  if (absl::Status s = just_assigned ? consumer_->Assign(slot_.topic, slot_.partition, to)
                                     : consumer_->Seek(slot_.topic, slot_.partition, to);
      !s.ok()) {
    return s;
  }
  if (just_assigned) no_seek_before_ = to + 1;
  RecordCovered();
  next_ = covered_from_ = recheck_at_ = to;
  ++context_->metrics->read_scan_rewinds;
  return absl::OkStatus();
}

void SlotScan::OnEndOfPartition(int64_t offset) {
  known_end_ = std::max(known_end_, offset);
  next_ = std::max(next_, offset);
  RecordCovered();  // reads starting now find the slot indexed up to its end
  AllIdle(true, absl::OkStatus());
}

absl::Status SlotScan::OnKafkaError(rd_kafka_resp_err_t err, int64_t offset) {
  absl::Status status =
      KafkaErrorToStatus(err, absl::StrCat("reading ", slot_.topic, "[", slot_.partition, "]"));
  if (IsDamagedRecords(err)) {
    // Which entries the damaged batch held is unknown, so every read of the scan ends here, as
    // a read ends at a corrupt entry: DATA_LOSS, with what came before it delivered.
    const int64_t at = std::max(offset, next_);
    const absl::Status damage = absl::DataLossError(absl::StrCat(
        "Kafka's log of ", slot_.topic, "[", slot_.partition, "] is damaged at offset ", at, " (",
        status.message(),
        "); the entries before it were delivered, and a read starting after the damaged records "
        "goes on"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;  // reads going on elsewhere must not join this scan again
    }
    for (auto it = members_.begin(); it != members_.end();) {
      if (!(*it)->done() && (*it)->resume_at() > at) {
        // Not reading the damaged records: goes on in a scan of its own.
        std::shared_ptr<ReadMember> m = std::move(*it);
        it = members_.erase(it);
        m->Detach();
        continue;
      }
      (*it)->OnDamaged(damage);
      ++it;
    }
    // Reads that were joining or waiting for the scan to go back for them had not reached the
    // damage: told to read again, a scan of their own finds out whether it lies in their way.
    return absl::UnavailableError(
        absl::StrCat("the scan of ", slot_.topic, "[", slot_.partition,
                     "] stopped at records damaged in Kafka's log at offset ", at,
                     " before this read reached them; read again"));
  }
  if (absl::IsDataLoss(status)) return OnLostRecords();
  if (!absl::IsUnavailable(status)) return status;
  // librdkafka retries on its own; each read gives up at its deadline.
  AllIdle(false, status);
  return absl::OkStatus();
}

absl::Status SlotScan::OnLostRecords() {
  // Pruned under the scan (entries truncated meanwhile), or really lost? Only the members that
  // needed the missing records end; the scan goes on past them.
  const Clock::time_point deadline = Clock::now() + kKafkaRequestTimeout;
  absl::StatusOr<int64_t> low = host_->LowWatermark(slot_, deadline);
  if (!low.ok()) {
    AllIdle(false, low.status());
    return absl::OkStatus();
  }
  if (absl::Status s = host_->PrunedOrLost(slot_, next_, *low, deadline); absl::IsDataLoss(s)) {
    LoseRange(*low, s);
  } else if (!s.ok()) {
    AllIdle(false, s);
    return absl::OkStatus();
  }
  RecordCovered();
  if (index_ != nullptr) {
    // Out of range although nothing below the scan is gone: the scan is past the partition's
    // end, which went back.
    if (*low <= next_) {
      index_->LogWentBack();
      ++context_->metrics->read_index_drops;
    }
    index_->ForgetBelow(*low);
    log_changes_ = index_->log_changes();  // assigned again below: on the log there is now
  }
  next_ = std::max(next_, *low);
  covered_from_ = next_;
  recheck_at_ = no_seek_before_ = next_ + 1;  // the fetcher starts with the first record
  // Assigned again, not sought: after an out-of-range error the partition's fetcher is stopped,
  // and a seek answers _STATE.
  return consumer_->Assign(slot_.topic, slot_.partition, next_);
}

void SlotScan::OnRecord(const rd_kafka_message_t& msg) {
  next_ = msg.offset + 1;
  context_->metrics->read_scanned_bytes += msg.len;
  {
    // Later joiners must start after this record; those that joined while it was being fetched
    // (their start is at most its offset) are admitted now, so that they get it.
    std::lock_guard<std::mutex> lock(mu_);
    position_ = next_;
    if (next_ > furthest_) {
      furthest_ = next_;
      scanned_bytes_ += static_cast<int64_t>(msg.len);
    }
    if (!pending_.empty()) {
      for (auto& m : pending_) members_.push_back(std::move(m));
      pending_.clear();
      Reindex();
    }
  }
  const std::optional<uint64_t> key = DecodeKey(msg.key, msg.key_len);
  covered_bytes_ += msg.len;
  bytes_since_skip_ += static_cast<int64_t>(msg.len);
  const std::string_view value(static_cast<const char*>(msg.payload), msg.len);
  if (key) {
    OnNamespaceRecord(msg.offset, *key, value);
  } else if (IsPackedRecord(value) && DecodePacked(value, &packed_).ok()) {
    // Each namespace's record in it is read as if it were the Kafka record at this offset.
    for (const PackedPart& part : packed_)
      OnNamespaceRecord(msg.offset, part.namespace_id, part.record);
  } else {
    ++context_->records_skipped;  // not written by walserver
  }
  // Only between Kafka records: the index takes this offset as covered, so every part of a
  // packed record must be in seen_ first.
  if (index_ != nullptr && seen_.size() >= kRecordEvery) RecordCovered();
  // Members at their end finish now; the others hear of cancellation and deadlines, and send
  // what they have, every kMemberCheckInterval even while records keep coming.
  const bool check_all = Clock::now() - last_member_check_ > kMemberCheckInterval;
  if (check_all) last_member_check_ = Clock::now();
  if (check_all || next_ >= min_end_) {
    RecordCovered();  // a read starting once these finish finds what they read indexed
    for (auto& m : members_) {
      if (check_all || next_ >= m->end()) m->OnIdle(next_, false, absl::OkStatus());
    }
    changed_ = true;
    DetachOverLimit();
  }
}

void SlotScan::OnNamespaceRecord(int64_t offset, uint64_t namespace_id, std::string_view value) {
  if (index_ != nullptr) seen_.push_back(SlotIndex::Seen{namespace_id, offset});
  auto it = by_namespace_.find(namespace_id);
  if (it == by_namespace_.end()) return;
  bool full = false;
  // Only at the tail: a scan still reading a backlog batches as it fetches.
  if (offset >= tail_from_) unsent_.insert(namespace_id);
  for (ReadMember* m : it->second) {
    m->OnRecord(offset, namespace_id, value);
    if (m->done()) changed_ = true;  // reached its limit
    full = full || m->over_limit();
  }
  // Only a member this record filled can be over its bound now: no walk over every member of
  // the scan per record (a ReadMany may bring a thousand).
  if (full) DetachOverLimit();
}

void SlotScan::Reindex() {
  members_.erase(std::remove_if(members_.begin(), members_.end(),
                                [](const std::shared_ptr<ReadMember>& m) { return m->done(); }),
                 members_.end());
  by_namespace_.clear();
  min_end_ = std::numeric_limits<int64_t>::max();
  max_end_ = 0;
  bounded_end_ = 0;
  tail_from_ = 0;
  for (const auto& m : members_) {
    tail_from_ = std::max(tail_from_, m->caught_up_at());
    by_namespace_[m->namespace_id()].push_back(m.get());
    min_end_ = std::min(min_end_, m->end());
    max_end_ = std::max(max_end_, m->end());
    // A following read's end is open; the others end where the slot ended when they began.
    if (m->end() != std::numeric_limits<int64_t>::max()) {
      bounded_end_ = std::max(bounded_end_, m->end());
    }
  }
  known_end_ = std::max(known_end_, bounded_end_);
  changed_ = false;
  // The reads changed, and so may what the scan can skip.
  recheck_at_ = std::max(next_, no_seek_before_);
}

void SlotScan::AllIdle(bool at_end_of_partition, const absl::Status& status) {
  RecordCovered();  // a read starting once members finish finds what they read indexed
  for (auto& m : members_) m->OnIdle(next_, at_end_of_partition, status);
  unsent_.clear();  // OnIdle sent what each member had
  changed_ = true;
  DetachOverLimit();
}

void SlotScan::SendUnsent() {
  // by_namespace_ may still hold members that finished (SendBatched skips them); a namespace
  // whose members left is not found.
  bool over_limit = false;
  for (uint64_t key : unsent_) {
    if (auto it = by_namespace_.find(key); it != by_namespace_.end()) {
      for (ReadMember* m : it->second) {
        m->SendBatched();
        over_limit = over_limit || m->over_limit();
      }
    }
  }
  unsent_.clear();
  if (over_limit) DetachOverLimit();
}

void SlotScan::WaitForSlowClients() {
  for (auto& m : members_) {
    const Clock::time_point give_up = Clock::now() + kMaxWaitForRoom;
    while (!m->done() && m->over_limit() && Clock::now() < give_up) {
      m->WaitForRoom(kMemberCheckInterval);
      // Meanwhile the member still hears of cancellation, deadlines and shutdown.
      if (m->over_limit()) m->OnIdle(next_, false, absl::OkStatus());
      changed_ = true;
    }
  }
}

bool SlotScan::OnlyItsCallWaits(const ReadMember& m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pending_.empty() || !rewinding_.empty()) return false;
  }
  for (const auto& other : members_) {
    if (other.get() == &m || other->done()) continue;
    if (m.call_budget() == nullptr || other->call_budget() != m.call_budget()) return false;
  }
  return true;
}

void SlotScan::WaitForPullingClients() {
  for (auto& m : members_) {
    while (!m->done() && m->over_limit() && m->pulling() && OnlyItsCallWaits(*m)) {
      m->WaitForRoom(kPollWhileBehind);
      // Meanwhile the member still hears of cancellation, deadlines and shutdown.
      if (m->over_limit()) m->OnIdle(next_, false, absl::OkStatus());
      changed_ = true;
    }
  }
}

void SlotScan::DetachOverLimit() {
  if (shared_) {
    WaitForPullingClients();
  } else {
    WaitForSlowClients();
  }
  bool detached = false;
  for (auto it = members_.begin(); it != members_.end();) {
    if ((*it)->done() || !(*it)->over_limit()) {
      ++it;
      continue;
    }
    std::shared_ptr<ReadMember> m = std::move(*it);
    it = members_.erase(it);
    m->Detach();
    ++context_->metrics->read_scan_detaches;
    detached = true;
  }
  if (detached) Reindex();  // by_namespace_ points at members
}

void SlotScan::LoseRange(int64_t low, const absl::Status& loss) {
  for (auto& m : members_) {
    if (!m->done() && m->resume_at() < low && next_ < m->end()) m->OnLost(low, loss);
  }
  changed_ = true;
}

int64_t SlotScan::FirstNeeded(const std::vector<std::shared_ptr<ReadMember>>& members) const {
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const auto& m : members) {
    first = std::min(first, index_ == nullptr
                                ? m->resume_at()
                                : index_->NextStretch(m->namespace_id(), m->resume_at()).begin);
  }
  return first;
}

absl::Status SlotScan::SkipAhead() {
  if (next_ < no_seek_before_) {
    // The consumer was assigned just now (a rewind, a change of fetch size) and would refuse a
    // seek: the look waits for its first record.
    recheck_at_ = no_seek_before_;
    return absl::OkStatus();
  }
  const int64_t min_skip =
      std::max(kMinSkip, index_->OffsetsHolding(context_->options.index_min_skip_bytes));
  int64_t target = SlotIndex::kNoEnd;
  int64_t recheck = SlotIndex::kNoEnd;
  for (const auto& m : members_) {
    if (m->done()) continue;
    const SlotIndex::Stretch stretch = index_->NextStretch(m->namespace_id(), next_);
    target = std::min(target, stretch.begin);
    recheck = std::min(recheck, stretch.end);
    // This read needs what is near, so nothing is skipped whatever the others need: a dense
    // ReadMany (every record some read's) would otherwise pay a lookup per read at each look.
    // Its stretch's end is in `recheck`, so the scan looks again when that read may skip.
    if (target - next_ < min_skip) break;
  }
  if (target == SlotIndex::kNoEnd || target - next_ < min_skip) {
    // A member's stretch may end at the next record; with many members, looking again that
    // often would cost more than reading a few records more.
    const auto least = next_ + 1 + static_cast<int64_t>(members_.size()) / kMembersPerRecheck;
    recheck_at_ = std::clamp(recheck, least, std::max(least, next_ + kMaxRecheck));
    if (fetch_size_ == FetchSize::kNarrow && bytes_since_skip_ >= kWideAgainAfterBytes) {
      bytes_since_skip_ = 0;
      // Where the scan is (position_ is next_ already): only the fetches change.
      if (!FetchFrom(next_, FetchSize::kWide).ok()) {
        recheck_at_ = no_seek_before_ = next_ + kMaxRecheck;
        return consumer_->Assign(slot_.topic, slot_.partition, next_);
      }
      recheck_at_ = std::max(recheck_at_, no_seek_before_);
    }
    return absl::OkStatus();
  }
  if (context_->before_skip_for_test) context_->before_skip_for_test();
  {
    // A read joining from now on must find the scan past its start, or make it go back: none
    // may join in between and miss the records skipped.
    std::lock_guard<std::mutex> lock(mu_);
    if (!pending_.empty() || !rewinding_.empty()) return absl::OkStatus();  // admitted first
    position_ = target;
  }
  // A skip past the end of every read needs no narrow consumer: the scan ends there.
  if (!FetchFrom(target, target >= max_end_ ? fetch_size_ : FetchSize::kNarrow).ok()) {
    // Only a shortcut: read on from next_ instead. A seek that timed out may still take effect
    // later, so the partition is assigned again at next_, which settles where the fetcher is.
    // Reads that joined meanwhile saw the scan at `target`: those behind it wait in
    // rewinding_, as for any scan past their start; the others drop what is below their start.
    {
      std::lock_guard<std::mutex> lock(mu_);
      position_ = next_;
    }
    recheck_at_ = no_seek_before_ = next_ + kMaxRecheck;
    return consumer_->Assign(slot_.topic, slot_.partition, next_);
  }
  // What lies between is indexed already: the scan's cover goes on unbroken.
  RecordCovered();
  next_ = covered_from_ = target;
  recheck_at_ = std::max(target, no_seek_before_);
  furthest_ = std::max(furthest_, next_);
  bytes_since_skip_ = 0;
  ++context_->metrics->read_index_skips;
  // Members whose range ended in the stretch skipped finish now.
  if (next_ >= min_end_) {
    for (auto& m : members_) {
      if (next_ >= m->end()) m->OnIdle(next_, false, absl::OkStatus());
    }
    changed_ = true;
  }
  return absl::OkStatus();
}

absl::Status SlotScan::FetchFrom(int64_t offset, FetchSize size) {
  if (size != fetch_size_) {
    auto acquired = host_->AcquireConsumer(size);
    if (acquired.ok()) {
      if ((*acquired)->Assign(slot_.topic, slot_.partition, offset).ok()) {
        host_->ReleaseConsumer(std::exchange(consumer_, std::move(*acquired)), fetch_size_,
                               FetchMayWait());
        fetch_size_ = size;
        no_seek_before_ = offset + 1;  // the fetcher starts with the first record
        ++context_->metrics->read_fetch_size_changes;
        return absl::OkStatus();
      }
      host_->ReleaseConsumer(std::move(*acquired), size, false);
    }
    // Fetches of the size in use are only slower: the scan goes on with them.
  }
  return consumer_->Seek(slot_.topic, slot_.partition, offset);
}

void SlotScan::RecordCovered() {
  if (index_ == nullptr) return;
  index_->Record(covered_from_, next_, seen_, covered_bytes_, log_changes_);
  seen_.clear();
  covered_bytes_ = 0;
  covered_from_ = next_;
}

}  // namespace wal
