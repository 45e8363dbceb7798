#include "server/log/retried_entries.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

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

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Follows the records of a slot in offset order and names the entries found whole: a split
// entry counts only once its last chunk is seen after all the others (a torn one is not
// written, for its readers skip it).
class WholeEntries {
 public:
  WholeEntries(const absl::flat_hash_set<SequenceKey>& wanted,
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

  // The first copy is the one reads deliver.
  void Note(const SequenceKey& key, int64_t offset) {
    if (wanted_.contains(key)) found_->try_emplace(key, static_cast<uint64_t>(offset));
  }

  const absl::flat_hash_set<SequenceKey>& wanted_;
  absl::flat_hash_map<SequenceKey, uint64_t>* const found_;
  std::map<std::pair<uint64_t, uint64_t>, Started> started_;  // by session and nonce
};

absl::Status ShuttingDown() {
  return absl::UnavailableError(
      "walserver is shutting down; nothing was written, retry with the same writer_id and "
      "sequence");
}

}  // namespace

RetriedEntries::RetriedEntries(RetriedEntriesOptions options)
    : options_(std::move(options)), lookups_(options_.threads) {}

RetriedEntries::~RetriedEntries() = default;

RetriedEntries::Claim::~Claim() { owner_->Release(this); }

void RetriedEntries::Claim::Written(const std::vector<uint64_t>& ids) {
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
  settled_.notify_all();
}

std::shared_ptr<RetriedEntries::Claim> RetriedEntries::ClaimFirstAttempt(
    const std::vector<AppendItem>& items) {
  std::shared_ptr<Claim> claim(new Claim(this));
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < items.size(); ++i) {
    if (!IsStamped(items[i])) continue;
    if (in_flight_.contains(KeyOf(items[i]))) {
      // Claimed by another write, or twice in this one: undo, and let Look sort it out.
      for (const auto& [key, index] : claim->keys_) in_flight_.erase(key);
      claim->keys_.clear();
      return nullptr;
    }
    in_flight_.emplace(KeyOf(items[i]), claim.get());
    claim->keys_.emplace_back(KeyOf(items[i]), i);
  }
  return claim;
}

void RetriedEntries::Look(std::vector<AppendItem> items, int64_t first_attempt_ms,
                          Clock::time_point deadline, LookDone done) {
  lookups_.Post(
      [this, items = std::move(items), first_attempt_ms, deadline, done = std::move(done)] {
        std::shared_ptr<Claim> claim;
        absl::StatusOr<Found> found = Resolve(items, first_attempt_ms, deadline, &claim);
        done(std::move(found), std::move(claim));
      });
}

absl::StatusOr<RetriedEntries::Found> RetriedEntries::Resolve(const std::vector<AppendItem>& items,
                                                              int64_t first_attempt_ms,
                                                              Clock::time_point deadline,
                                                              std::shared_ptr<Claim>* claim) {
  const Clock::time_point answer_by = AnswerBy(deadline);
  const int64_t since_ms = first_attempt_ms > 0
                               ? first_attempt_ms - kClockMargin.count()
                               : NowMs() - kUnsaidLookback.count() - kClockMargin.count();
  Found found(items.size());
  // Until every stamped item is found or claimed for this retry: another retry of the same
  // entries may claim one while this one reads the log, and then this one waits for it.
  for (;;) {
    std::vector<size_t> unknown;  // stamped, not found yet
    {
      std::unique_lock<std::mutex> lock(mu_);
      std::vector<size_t> waited;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!IsStamped(items[i]) || found[i]) continue;
        auto it = in_flight_.find(KeyOf(items[i]));
        if (it == in_flight_.end()) continue;
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
      for (size_t i = 0; i < items.size(); ++i) {
        if (IsStamped(items[i]) && !found[i]) unknown.push_back(i);
      }
    }
    if (unknown.empty()) break;

    // Read the log for them, slot by slot.
    std::map<Slot, absl::flat_hash_set<SequenceKey>> wanted;
    for (size_t i : unknown) wanted[items[i].slot].insert(KeyOf(items[i]));
    absl::flat_hash_map<SequenceKey, uint64_t> in_log;
    for (const auto& [slot, keys] : wanted) {
      if (absl::Status s = Scan(slot, since_ms, answer_by, keys, &in_log); !s.ok()) {
        if (stopping_) return ShuttingDown();
        return absl::UnavailableError(absl::StrCat(
            "looking for the first copies of retried entries in ", slot.topic, "/", slot.partition,
            ": ", s.message(),
            "; nothing was written, retry later with the same writer_id and sequence"));
      }
    }
    for (size_t i : unknown) {
      if (auto it = in_log.find(KeyOf(items[i])); it != in_log.end()) found[i] = it->second;
    }

    // Claim what is still not found, unless another write claimed it meanwhile.
    std::lock_guard<std::mutex> lock(mu_);
    bool raced = false;
    for (size_t i : unknown) {
      if (!found[i] && in_flight_.contains(KeyOf(items[i]))) raced = true;
    }
    if (raced) continue;
    auto made = std::shared_ptr<Claim>(new Claim(this));
    size_t rank = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (found[i]) continue;
      const size_t index = rank++;
      if (!IsStamped(items[i])) continue;
      if (in_flight_.try_emplace(KeyOf(items[i]), made.get()).second) {
        made->keys_.emplace_back(KeyOf(items[i]), index);
      }
    }
    *claim = std::move(made);
    return found;
  }
  *claim = std::shared_ptr<Claim>(new Claim(this));  // everything was found: nothing to write
  return found;
}

absl::Status RetriedEntries::Scan(const Slot& slot, int64_t since_ms, Clock::time_point deadline,
                                  const absl::flat_hash_set<SequenceKey>& wanted,
                                  absl::flat_hash_map<SequenceKey, uint64_t>* found) {
  absl::StatusOr<Watermarks> marks = QueryWatermarks(options_.admin, slot, deadline);
  if (!marks.ok()) return marks.status();
  int64_t from = marks->low;
  if (options_.offsets_for_times) {
    absl::StatusOr<int64_t> at = OffsetForTime(options_.admin, slot, since_ms, deadline);
    if (!at.ok()) return at.status();
    from = *at < 0 ? marks->high : std::max(from, *at);  // -1: nothing written since
  }
  const int64_t end =
      std::max(marks->high, options_.acknowledged_end ? options_.acknowledged_end(slot) : 0);
  if (from >= end) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<Consumer>> consumer =
      Consumer::Create(options_.consumer, absl::StrCat(options_.name, "-retries"));
  if (!consumer.ok()) return consumer.status();
  if (absl::Status s = (*consumer)->Assign(slot.topic, slot.partition, from); !s.ok()) return s;
  const size_t found_before = found->size();  // of other slots
  WholeEntries entries(wanted, found);
  int64_t next = from;
  while (next < end && found->size() - found_before < wanted.size()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (stopping_) return ShuttingDown();
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("read to offset ", next, " of ", end, " before the deadline"));
    }
    for (const Message& msg :
         (*consumer)->PollBatch(static_cast<int>(std::min<int64_t>(left.count(), 100)), 256)) {
      if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;
      if (msg->err) return absl::UnavailableError(rd_kafka_err2str(msg->err));
      next = std::max(next, msg->offset + 1);
      entries.Add(*msg);
    }
  }
  (void)(*consumer)->Unassign();
  return absl::OkStatus();
}

void RetriedEntries::Stop() {
  stopping_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  settled_.notify_all();
}

int RetriedEntries::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

}  // namespace wal
