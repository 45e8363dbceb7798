#include "server/log/slot_index.h"

#include <algorithm>

namespace wal {

void SlotIndex::Record(int64_t from, int64_t to, const std::vector<Seen>& seen, uint64_t bytes) {
  if (to <= from) return;
  std::lock_guard<std::mutex> lock(mu_);
  bytes_recorded_ += bytes;
  offsets_recorded_ += static_cast<uint64_t>(to - from);
  const bool empty = from_ == to_;
  if (!empty && (to < from_ || from > to_)) {
    if (to <= to_) return;  // older than the stretch known, and apart from it
    Clear(from);
  }
  if (from_ == to_) {
    from_ = from;
    to_ = to;
  } else {
    from_ = std::min(from_, from);
    to_ = std::max(to_, to);
  }
  for (const Seen& s : seen) {
    if (s.offset >= from && s.offset < to) Add(s.namespace_id, s.offset);
  }
  if (run_count_ > kMaxRuns) Clear(to);
}

void SlotIndex::Add(uint64_t namespace_id, int64_t offset) {
  std::vector<Run>& runs = runs_[namespace_id];
  // Scans see records in order: almost always at or past the last run.
  if (runs.empty() || offset > runs.back().last) {
    if (!runs.empty() && offset - runs.back().last <= kJoinGap) {
      runs.back().last = offset;
    } else {
      runs.push_back(Run{offset, offset});
      ++run_count_;
    }
    return;
  }
  // The first run not ending before `offset`.
  auto it = std::lower_bound(runs.begin(), runs.end(), offset,
                             [](const Run& r, int64_t o) { return r.last < o; });
  if (it->first <= offset) return;  // inside it already
  const bool joins_previous = it != runs.begin() && offset - std::prev(it)->last <= kJoinGap;
  const bool joins_next = it->first - offset <= kJoinGap;
  if (joins_previous && joins_next) {
    std::prev(it)->last = it->last;
    runs.erase(it);
    --run_count_;
  } else if (joins_previous) {
    std::prev(it)->last = offset;
  } else if (joins_next) {
    it->first = offset;
  } else {
    runs.insert(it, Run{offset, offset});
    ++run_count_;
  }
}

void SlotIndex::Clear(int64_t at) {
  runs_.clear();
  run_count_ = 0;
  from_ = to_ = at;
}

void SlotIndex::ForgetBelow(int64_t low) {
  std::lock_guard<std::mutex> lock(mu_);
  if (low <= from_) return;
  if (low >= to_) {
    Clear(low);
    return;
  }
  from_ = low;
  for (auto it = runs_.begin(); it != runs_.end();) {
    std::vector<Run>& runs = it->second;
    auto keep = std::lower_bound(runs.begin(), runs.end(), low,
                                 [](const Run& r, int64_t o) { return r.last < o; });
    run_count_ -= static_cast<size_t>(keep - runs.begin());
    runs.erase(runs.begin(), keep);
    if (!runs.empty()) runs.front().first = std::max(runs.front().first, low);
    it = runs.empty() ? runs_.erase(it) : std::next(it);
  }
}

SlotIndex::Stretch SlotIndex::NextStretch(uint64_t namespace_id, int64_t from) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (from < from_ || from >= to_) return Stretch{from, kNoEnd};
  if (auto found = runs_.find(namespace_id); found != runs_.end()) {
    const std::vector<Run>& runs = found->second;
    auto it = std::lower_bound(runs.begin(), runs.end(), from,
                               [](const Run& r, int64_t o) { return r.last < o; });
    if (it != runs.end()) return Stretch{std::max(from, it->first), it->last + 1};
  }
  // None of its records until the end of the stretch; past it, every record must be read.
  return Stretch{to_, kNoEnd};
}

int64_t SlotIndex::OffsetsHolding(uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_recorded_ == 0) return static_cast<int64_t>(bytes);
  const double per_offset =
      static_cast<double>(bytes_recorded_) / static_cast<double>(offsets_recorded_);
  return static_cast<int64_t>(static_cast<double>(bytes) / per_offset);
}

size_t SlotIndex::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return run_count_;
}

int64_t SlotIndex::vouched_from() const {
  std::lock_guard<std::mutex> lock(mu_);
  return from_;
}

int64_t SlotIndex::vouched_to() const {
  std::lock_guard<std::mutex> lock(mu_);
  return to_;
}

SlotIndex& SlotIndexes::Of(const Slot& slot) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<SlotIndex>& index = of_[slot];
  if (!index) index = std::make_unique<SlotIndex>();
  return *index;
}

}  // namespace wal
