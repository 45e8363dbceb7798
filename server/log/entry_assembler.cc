#include "server/log/entry_assembler.h"

#include <algorithm>
#include <utility>

#include "server/common/crc32c.h"

namespace wal {

void EntryAssembler::Add(int64_t offset, std::string_view value, std::vector<AssembledEntry>* out) {
  absl::StatusOr<DecodedRecord> record = DecodeRecord(value);
  if (!record.ok()) {
    ++skipped_;
    return;
  }
  const RecordHeader& h = record->header;
  DropTorn(h, out);
  switch (h.kind) {
    case RecordKind::kFence:
      // Entries completed from here on must be of this epoch or later. (One that started
      // before the fence and ends after it was acknowledged to a fenced writer: dropped too.)
      min_epoch_ = std::max(min_epoch_, h.stamp.epoch);
      return;
    case RecordKind::kFull:
      if (lend_records_ && partials_.empty() && ready_.empty()) {
        Complete(offset, h, std::string(), record->payload, out);
      } else {
        Complete(offset, h, std::string(record->payload), std::nullopt, out);
      }
      return;
    case RecordKind::kFirst: {
      if (h.chunk_index != 0 || h.entry_bytes > max_entry_bytes_ ||
          record->payload.size() > h.entry_bytes) {
        ++skipped_;
        return;
      }
      auto [it, inserted] = partials_.try_emplace(h.entry_nonce);
      if (!inserted) {  // a First again for the same nonce: the older one cannot be completed
        buffered_bytes_ -= it->second.data.size();
        it->second = Partial{};
        ++skipped_;
      }
      Partial& p = it->second;
      p.first_offset = offset;
      p.header = h;
      p.data.reserve(h.entry_bytes);
      p.data.append(record->payload);
      buffered_bytes_ += p.data.size();
      return;
    }
    case RecordKind::kMiddle:
    case RecordKind::kLast: {
      auto it = partials_.find(h.entry_nonce);
      if (it == partials_.end()) {  // its First lies before the range or was lost
        ++skipped_;
        return;
      }
      Partial& p = it->second;
      if (h.chunk_index != p.next_chunk || h.entry_bytes != p.header.entry_bytes ||
          h.entry_crc != p.header.entry_crc ||
          p.data.size() + record->payload.size() > p.header.entry_bytes) {
        buffered_bytes_ -= p.data.size();
        partials_.erase(it);
        ++skipped_;
        Release(out);
        return;
      }
      p.data.append(record->payload);
      buffered_bytes_ += record->payload.size();
      ++p.next_chunk;
      if (h.kind == RecordKind::kLast) {
        Partial done = std::move(p);
        partials_.erase(it);
        buffered_bytes_ -= done.data.size();
        Complete(done.first_offset, done.header, std::move(done.data), std::nullopt, out);
      }
      return;
    }
  }
}

bool EntryAssembler::Accept(int64_t first_offset, const RecordHeader& header,
                            std::string_view data) {
  if (data.size() != header.entry_bytes) {
    ++skipped_;
    return false;
  }
  // An entry no read would return anyway (a fenced writer's, a copy of one already seen) is
  // dropped as such, corrupt or not: only an entry a read would deliver makes it fail.
  if (header.stamp.epoch < min_epoch_) {
    ++fenced_;
    return false;
  }
  if (Crc32c(data) != header.entry_crc) {
    if (seen_.Contains(header.stamp.writer_id, header.stamp.sequence)) {
      ++duplicates_;
    } else {
      ++skipped_;
      corrupt_.push_back({first_offset, header.source.created_ms});
    }
    return false;
  }
  return true;
}

void EntryAssembler::Complete(int64_t first_offset, const RecordHeader& header, std::string data,
                              std::optional<std::string_view> lent,
                              std::vector<AssembledEntry>* out) {
  if (!Accept(first_offset, header, lent ? *lent : std::string_view(data))) {
    Release(out);
    return;
  }
  if (first_offset < floor_) {  // not wanted, and no stand-in for a later copy
    Release(out);
    return;
  }
  AssembledEntry entry{static_cast<uint64_t>(first_offset),
                       std::move(data),
                       lent,
                       header.stamp,
                       header.entry_crc,
                       header.source.created_ms};
  if (partials_.empty() && ready_.empty()) {
    // Nothing begun before it waits: it goes out now, as Release would hand it out, without a
    // trip through ready_ (a node allocated and freed per entry of a replay).
    if (!seen_.Add(header.stamp.writer_id, header.stamp.sequence)) {
      ++duplicates_;
      return;
    }
    out->push_back(std::move(entry));
    return;
  }
  // Add lends only an entry it hands out at once; one held back must own its bytes.
  if (entry.lent) {
    entry.data.assign(*entry.lent);
    entry.lent.reset();
  }
  ready_bytes_ += entry.data.size();
  ready_.emplace(first_offset, std::move(entry));
  Release(out);
}

EntryAssembler::Fate EntryAssembler::FateOf(const Partial& p, const RecordHeader& next) const {
  const RecordSource& mine = p.header.source;
  const RecordSource& theirs = next.source;
  if (next.kind == RecordKind::kFence && next.stamp.epoch > p.header.stamp.epoch) {
    return Fate::kFenced;  // it could never be read
  }
  if (mine.session != 0 && theirs.session == mine.session) {
    // One process produces an entry's chunks back to back and in order.
    const bool next_chunk =
        next.entry_nonce == p.header.entry_nonce && next.chunk_index == p.next_chunk;
    return next_chunk ? Fate::kMayComplete : Fate::kTorn;
  }
  if (mine.origin != 0 && theirs.origin == mine.origin && theirs.session != 0 &&
      theirs.session != mine.session) {
    return Fate::kTorn;  // its writer restarted
  }
  // Unsigned arithmetic: a corrupt record can carry any 64-bit time, and the difference of two
  // int64 values can overflow; when theirs > mine the unsigned difference is exact.
  if (mine.created_ms != 0 && theirs.created_ms > mine.created_ms &&
      static_cast<uint64_t>(theirs.created_ms) - static_cast<uint64_t>(mine.created_ms) >
          static_cast<uint64_t>(torn_after_ms_)) {
    return Fate::kTorn;  // its writer's producer gave up on the missing chunks long ago
  }
  return Fate::kMayComplete;
}

void EntryAssembler::DropTorn(const RecordHeader& next, std::vector<AssembledEntry>* out) {
  bool dropped = false;
  for (auto it = partials_.begin(); it != partials_.end();) {
    const Fate fate = FateOf(it->second, next);
    if (fate == Fate::kMayComplete) {
      ++it;
      continue;
    }
    ++(fate == Fate::kTorn ? torn_ : fenced_);
    buffered_bytes_ -= it->second.data.size();
    it = partials_.erase(it);
    dropped = true;
  }
  if (dropped) Release(out);
}

void EntryAssembler::Release(std::vector<AssembledEntry>* out) {
  int64_t oldest_partial = std::numeric_limits<int64_t>::max();
  for (const auto& [nonce, p] : partials_)
    oldest_partial = std::min(oldest_partial, p.first_offset);
  while (!ready_.empty() && ready_.begin()->first < oldest_partial) {
    auto node = ready_.extract(ready_.begin());
    ready_bytes_ -= node.mapped().data.size();
    if (node.key() < floor_) continue;  // below a floor raised while it waited
    if (!seen_.Add(node.mapped().stamp.writer_id, node.mapped().stamp.sequence)) {
      ++duplicates_;
      continue;
    }
    out->push_back(std::move(node.mapped()));
  }
}

std::optional<int64_t> EntryAssembler::oldest_incomplete() const {
  std::optional<int64_t> oldest;
  for (const auto& [nonce, p] : partials_) {
    if (!oldest || p.first_offset < *oldest) oldest = p.first_offset;
  }
  return oldest;
}

void EntryAssembler::Flush(std::vector<AssembledEntry>* out) {
  skipped_ += partials_.size();
  partials_.clear();
  buffered_bytes_ = 0;
  Release(out);
}

}  // namespace wal
