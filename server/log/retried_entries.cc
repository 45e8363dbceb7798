#include "server/log/retried_entries.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/common/namespace_key.h"
#include "server/kafka/admin.h"
#include "server/kafka/consumer.h"
#include "server/log/record_format.h"

namespace wal {
namespace {

SequenceKey KeyOf(const AppendItem& item) {
  return SequenceKey{item.namespace_id, item.stamp.writer_id, item.stamp.sequence};
}

// Follows the records of a slot in offset order and names the entries found whole: a split
// entry counts only once its last chunk is seen after all the others (a torn one is not
// written, for its readers skip it).
class WholeEntries {
 public:
  // Split entries begun and not yet whole: a copy that completes later may have a lower id.
  bool pending() const { return !started_.empty(); }

  WholeEntries(const absl::flat_hash_map<SequenceKey, int64_t>& wanted,
               absl::flat_hash_map<SequenceKey, uint64_t>* found)
      : wanted_(wanted), found_(found) {}

  void Add(const rd_kafka_message_t& msg) {
    const std::string_view value(static_cast<const char*>(msg.payload), msg.len);
    if (IsPackedRecord(value)) {
      std::vector<PackedPart> parts;
      if (!DecodePacked(value, &parts).ok()) return;
      for (const PackedPart& part : parts) AddRecord(part.namespace_id, part.record, msg.offset);
      return;
    }
    const std::optional<uint64_t> ns = DecodeKey(msg.key, msg.key_len);
    if (ns) AddRecord(*ns, value, msg.offset);
  }

 private:
  struct Started {
    SequenceKey key;
    int64_t first_offset = 0;
    uint32_t next_chunk = 0;
  };

  void AddRecord(uint64_t namespace_id, std::string_view value, int64_t offset) {
    absl::StatusOr<DecodedRecord> record = DecodeRecord(value);
    if (!record.ok()) return;
    const RecordHeader& h = record->header;
    const SequenceKey key{namespace_id, h.stamp.writer_id, h.stamp.sequence};
    const std::pair<uint64_t, uint64_t> entry{h.source.session, h.entry_nonce};
    switch (h.kind) {
      case RecordKind::kFull:
        Note(key, offset);
        break;
      case RecordKind::kFirst:
        if (wanted_.contains(key)) started_[entry] = Started{key, offset, 1};
        break;
      case RecordKind::kMiddle:
      case RecordKind::kLast: {
        auto it = started_.find(entry);
        if (it == started_.end()) break;
        if (h.chunk_index != it->second.next_chunk) {
          started_.erase(it);  // torn: a chunk is missing
        } else if (h.kind == RecordKind::kMiddle) {
          ++it->second.next_chunk;
        } else {
          Note(it->second.key, it->second.first_offset);
          started_.erase(it);
        }
        break;
      }
      case RecordKind::kFence:
        break;
    }
  }

  // The copy with the lowest id is the one reads deliver (two copies of a split entry may
  // interleave, the later one completing first).
  void Note(const SequenceKey& key, int64_t offset) {
    auto want = wanted_.find(key);
    if (want == wanted_.end() || offset < want->second) return;
    auto [it, inserted] = found_->try_emplace(key, static_cast<uint64_t>(offset));
    if (!inserted) it->second = std::min<uint64_t>(it->second, static_cast<uint64_t>(offset));
  }

  const absl::flat_hash_map<SequenceKey, int64_t>& wanted_;  // and its lowest offset
  absl::flat_hash_map<SequenceKey, uint64_t>* const found_;
  std::map<std::pair<uint64_t, uint64_t>, Started> started_;  // by session and nonce
};

absl::Status ShuttingDown() {
  return absl::UnavailableError(
      "walserver is shutting down; nothing was written, retry with the same writer_id and "
      "sequence");
}

}  // namespace

bool HasRepeatedEntry(const std::vector<AppendItem>& items) {
  absl::flat_hash_set<SequenceKey> seen;
  for (const AppendItem& item : items) {
    if (IsStamped(item) && !seen.insert(KeyOf(item)).second) return true;
  }
  return false;
}

RetriedEntries::RetriedEntries(RetriedEntriesOptions options)
    : options_(std::move(options)),
      nothing_claimed_(new Claim(this)),
      lookups_(std::make_unique<WorkQueue>(options_.threads)) {}

RetriedEntries::~RetriedEntries() = default;

RetriedEntries::Claim::~Claim() { owner_->Release(this); }

void RetriedEntries::Claim::Written(const std::vector<uint64_t>& ids) {
  // Only a retry waiting needs the ids; one that comes later, before the claim is released,
  // finds the copies in the log instead.
  if (keys_.empty() || owner_->waiting_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(owner_->mu_);
  for (const auto& [key, index] : keys_) {
    auto it = owner_->in_flight_.find(key);
    if (it != owner_->in_flight_.end() && it->second.by == this && index < ids.size()) {
      it->second.id = ids[index];
    }
  }
  owner_->settled_.notify_all();
}

void RetriedEntries::Release(const Claim* claim) {
  if (claim->keys_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, index] : claim->keys_) {
    auto it = in_flight_.find(key);
    if (it == in_flight_.end() || it->second.by != claim) continue;
    if (it->second.waiters > 0) {
      it->second.by = nullptr;  // the last retry waiting on it erases it
    } else {
      in_flight_.erase(it);
    }
  }
  if (waiting_ > 0) settled_.notify_all();  // changed under mu_: no waiter is missed
}

std::shared_ptr<RetriedEntries::Claim> RetriedEntries::ClaimFirstAttempt(
    const std::vector<AppendItem>& items) {
  if (std::none_of(items.begin(), items.end(), IsStamped)) return nothing_claimed_;
  std::shared_ptr<Claim> claim(new Claim(this));
  claim->keys_.reserve(items.size());
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < items.size(); ++i) {
    if (!IsStamped(items[i])) continue;
    const SequenceKey key = KeyOf(items[i]);
    if (!in_flight_.try_emplace(key, claim.get()).second) {
      // Claimed by another write, or twice in this one: undo, and let Look sort it out.
      for (const auto& [claimed, index] : claim->keys_) in_flight_.erase(claimed);
      claim->keys_.clear();
      return nullptr;
    }
    claim->keys_.emplace_back(key, i);
  }
  return claim;
}

void RetriedEntries::Look(std::vector<AppendItem> items, int64_t first_attempt_ms,
                          Clock::time_point deadline, LookDone done) {
  lookups_->Post(
      [this, items = std::move(items), first_attempt_ms, deadline, done = std::move(done)] {
        std::shared_ptr<Claim> claim;
        absl::StatusOr<Found> found =
            Clock::now() < AnswerBy(deadline)
                ? Resolve(items, first_attempt_ms, deadline, &claim)
                : absl::DeadlineExceededError(
                      "the retry waited for its turn to look for its first copies until its "
                      "deadline; nothing was written");
        done(std::move(found), std::move(claim));
      });
}

absl::StatusOr<RetriedEntries::Found> RetriedEntries::Resolve(const std::vector<AppendItem>& items,
                                                              int64_t first_attempt_ms,
                                                              Clock::time_point deadline,
                                                              std::shared_ptr<Claim>* claim) {
  // Half the time left at most: the entries not found must still be written.
  const Clock::time_point answer_by =
      std::min(AnswerBy(deadline), HalfwayTo(Within(deadline, options_.max_lookup)));
  const int64_t since_ms = std::max<int64_t>(
      0, (first_attempt_ms > 0 ? first_attempt_ms : UnixNowMs() - kUnsaidLookback.count()) -
             kClockMargin.count());
  Found found(items.size());
  // Claimed before the log is read: every other attempt at these entries (a retry sent again,
  // a first attempt that arrives late) waits for this one's outcome instead of writing too.
  std::shared_ptr<Claim> made(new Claim(this));
  std::vector<size_t> unknown;  // stamped, not found, claimed by `made`
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      std::vector<size_t> waited;  // held by other writes
      for (size_t i = 0; i < items.size(); ++i) {
        if (!IsStamped(items[i]) || found[i]) continue;
        auto it = in_flight_.find(KeyOf(items[i]));
        if (it == in_flight_.end()) continue;
        if (it->second.by == nullptr && !it->second.id) continue;  // settled: to be claimed
        ++it->second.waiters;
        waited.push_back(i);
      }
      if (!waited.empty()) ++waiting_;
      const bool settled = settled_.wait_until(lock, answer_by, [&] {
        if (stopping_) return true;
        for (size_t i : waited) {
          const InFlight& f = in_flight_.at(KeyOf(items[i]));
          if (!f.id && f.by != nullptr) return false;
        }
        return true;
      });
      if (!waited.empty()) --waiting_;
      for (size_t i : waited) {
        auto it = in_flight_.find(KeyOf(items[i]));
        if (it->second.id) found[i] = it->second.id;
        if (--it->second.waiters == 0 && it->second.by == nullptr) in_flight_.erase(it);
      }
      if (stopping_) return ShuttingDown();
      if (!settled) {
        return absl::UnavailableError(
            "a retried entry's first copy is still on its way to Kafka in this walserver; "
            "nothing was written, retry later with the same writer_id and sequence");
      }
      // Claim everything still unknown, under the same lock, or nothing: a retry holding part
      // while it waits for the rest could wait on another that holds the rest and waits too.
      bool taken = false;
      for (size_t i = 0; i < items.size() && !taken; ++i) {
        if (!IsStamped(items[i]) || found[i]) continue;
        auto it = in_flight_.find(KeyOf(items[i]));
        taken = it != in_flight_.end() && (it->second.by != nullptr || it->second.id);
      }
      if (taken) continue;  // wait for it in the next round
      for (size_t i = 0; i < items.size(); ++i) {
        if (!IsStamped(items[i]) || found[i]) continue;
        auto [it, inserted] = in_flight_.try_emplace(KeyOf(items[i]), made.get());
        if (!inserted) it->second.by = made.get();  // settled without an id, held by its waiters
        made->keys_.emplace_back(KeyOf(items[i]), kNotWritten);
        unknown.push_back(i);  // made->keys_[k] is the key of items[unknown[k]]
      }
      break;
    }
    if (stopping_) return ShuttingDown();
  }

  // Read the log for them, slot by slot.
  std::map<Slot, absl::flat_hash_map<SequenceKey, int64_t>> wanted;
  for (size_t i : unknown) {
    wanted[items[i].slot][KeyOf(items[i])] =
        options_.namespace_start ? options_.namespace_start(items[i].namespace_id) : 0;
  }
  absl::flat_hash_map<SequenceKey, uint64_t> in_log;
  for (const auto& [slot, keys] : wanted) {
    if (absl::Status s = Scan(slot, since_ms, answer_by, keys, &in_log); !s.ok()) {
      if (stopping_) return ShuttingDown();
      return absl::UnavailableError(
          absl::StrCat("looking for the first copies of retried entries in ", slot.topic, "/",
                       slot.partition, ": ", s.message(),
                       "; nothing was written, retry later with the same writer_id and sequence"));
    }
  }
  if (stopping_) return ShuttingDown();
  for (size_t i : unknown) {
    if (auto it = in_log.find(KeyOf(items[i])); it != in_log.end()) found[i] = it->second;
  }
  // The entries found settle with their ids (attempts waiting take them); the rest are this
  // retry's to write, each at its rank among the items not found.
  std::lock_guard<std::mutex> lock(mu_);
  size_t rank = 0;
  std::vector<size_t> write_index(items.size(), kNotWritten);
  for (size_t i = 0; i < items.size(); ++i) {
    if (!found[i]) write_index[i] = rank++;
  }
  for (size_t k = 0; k < unknown.size(); ++k) {
    const size_t i = unknown[k];
    if (found[i]) {
      in_flight_.at(KeyOf(items[i])).id = found[i];
    } else {
      made->keys_[k].second = write_index[i];
    }
  }
  settled_.notify_all();
  *claim = std::move(made);
  return found;
}

absl::Status RetriedEntries::Scan(const Slot& slot, int64_t since_ms, Clock::time_point deadline,
                                  const absl::flat_hash_map<SequenceKey, int64_t>& wanted,
                                  absl::flat_hash_map<SequenceKey, uint64_t>* found) {
  absl::StatusOr<Watermarks> marks = QueryWatermarks(options_.admin, slot, deadline);
  if (!marks.ok()) return marks.status();
  int64_t from = marks->low;
  if (options_.offsets_for_times) {
    absl::StatusOr<int64_t> at = OffsetForTime(options_.admin, slot, since_ms, deadline);
    if (!at.ok()) return at.status();
    from = *at < 0 ? marks->high : std::max(from, *at);  // -1: nothing written since
  }
  // What this walserver was acknowledged may lie past a stale leader's end: read to it, but
  // take the leader's end after kStaleEndWait (the log may have lost what it was told).
  const int64_t acknowledged = options_.acknowledged_end ? options_.acknowledged_end(slot) : 0;
  int64_t end = std::max(marks->high, acknowledged);
  if (from >= end) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<Consumer>> consumer =
      Consumer::Create(options_.consumer, absl::StrCat(options_.name, "-retries"));
  if (!consumer.ok()) return consumer.status();
  if (absl::Status s = (*consumer)->Assign(slot.topic, slot.partition, from); !s.ok()) return s;
  const size_t found_before = found->size();  // of other slots
  WholeEntries entries(wanted, found);
  int64_t next = from;
  constexpr Clock::time_point kNotAtEnd = Clock::time_point::max();
  Clock::time_point at_leaders_end = kNotAtEnd;  // since when the leader's end was reached
  while (next < end && (found->size() - found_before < wanted.size() || entries.pending())) {
    if (stopping_) return ShuttingDown();
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("read to offset ", next, " of ", end, " before the deadline"));
    }
    for (const Message& msg :
         (*consumer)->PollBatch(static_cast<int>(std::min<int64_t>(left.count(), 100)), 256)) {
      if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        // Reported once per end: the wait for the rest is checked after each poll.
        if (msg->offset >= marks->high && at_leaders_end == kNotAtEnd)
          at_leaders_end = Clock::now();
        continue;
      }
      if (msg->err) return absl::UnavailableError(rd_kafka_err2str(msg->err));
      next = std::max(next, msg->offset + 1);
      at_leaders_end = kNotAtEnd;  // more came
      entries.Add(*msg);
    }
    if (at_leaders_end != kNotAtEnd && Clock::now() - at_leaders_end > kStaleEndWait) break;
  }
  (void)(*consumer)->Unassign();
  return absl::OkStatus();
}

void RetriedEntries::Stop() {
  stopping_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  settled_.notify_all();
}

void RetriedEntries::Close() {
  Stop();
  lookups_.reset();  // runs what is queued (each ends at once), then joins
}

int RetriedEntries::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

}  // namespace wal
