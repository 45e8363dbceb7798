#include "server/log/slot_index.h"

#include <algorithm>

namespace wal {

void SlotIndex::Record(int64_t from, int64_t to, const std::vector<Seen>& seen, uint64_t bytes,
                       uint64_t log_changes) {
  if (to <= from) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (log_changes != log_changes_) return;
  ++changes_;
  bytes_recorded_ += bytes;
  offsets_recorded_ += static_cast<uint64_t>(to - from);
  // Joins every stretch it meets or touches.
  Covered joined{from, to};
  auto first = std::lower_bound(stretches_.begin(), stretches_.end(), from,
                                [](const Covered& c, int64_t f) { return c.to < f; });
  auto last = first;
  while (last != stretches_.end() && last->from <= to) {
    joined.from = std::min(joined.from, last->from);
    joined.to = std::max(joined.to, last->to);
    ++last;
  }
  const auto inserted = stretches_.insert(stretches_.erase(first, last), joined);
  const auto at = inserted - stretches_.begin();  // after the insert, which may reallocate
  if (stretches_.size() > kMaxStretches) {
    // The shortest other than the one just recorded into, which a scan is still extending.
    auto shortest = stretches_.end();
    for (auto it = stretches_.begin(); it != stretches_.end(); ++it) {
      if (it - stretches_.begin() == at) continue;
      if (shortest == stretches_.end() || it->to - it->from < shortest->to - shortest->from) {
        shortest = it;
      }
    }
    stretches_.erase(shortest);
  }
  for (const Seen& s : seen) {
    if (s.offset >= from && s.offset < to) Add(s.namespace_id, s.offset);
  }
  if (run_count_ > kMaxRuns) Clear();
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

void SlotIndex::Clear() {
  ++changes_;
  runs_.clear();
  run_count_ = 0;
  stretches_.clear();
}

void SlotIndex::ForgetBelow(int64_t low) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stretches_.empty() || low <= stretches_.front().from) return;
  ++changes_;
  while (!stretches_.empty() && stretches_.front().to <= low) stretches_.erase(stretches_.begin());
  if (!stretches_.empty()) stretches_.front().from = std::max(stretches_.front().from, low);
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

int64_t SlotIndex::covered_end() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stretches_.empty() ? 0 : stretches_.back().to;
}

void SlotIndex::LogWentBack() {
  std::lock_guard<std::mutex> lock(mu_);
  Clear();
  ++log_changes_;
}

bool SlotIndex::OnLog(const TopicId& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id == log_) return false;
  const bool another = log_ != TopicId{};  // else the first id this walserver learned
  log_ = id;
  Clear();
  ++log_changes_;
  return another;
}

uint64_t SlotIndex::log_changes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_changes_;
}

SlotIndex::Stretch SlotIndex::NextStretch(uint64_t namespace_id, int64_t from) const {
  std::lock_guard<std::mutex> lock(mu_);
  // The stretch holding `from`, or the next one.
  auto covered = std::lower_bound(stretches_.begin(), stretches_.end(), from,
                                  [](const Covered& c, int64_t f) { return c.to <= f; });
  if (covered == stretches_.end()) return Stretch{from, kNoEnd};
  if (from < covered->from) return Stretch{from, covered->from};
  if (auto found = runs_.find(namespace_id); found != runs_.end()) {
    const std::vector<Run>& runs = found->second;
    auto it = std::lower_bound(runs.begin(), runs.end(), from,
                               [](const Run& r, int64_t o) { return r.last < o; });
    if (it != runs.end() && it->first < covered->to) {
      return Stretch{std::max(from, it->first), std::min(it->last + 1, covered->to)};
    }
  }
  // None of its records until the end of the stretch; past it, every record must be read.
  return Stretch{covered->to, kNoEnd};
}

int64_t SlotIndex::OffsetsHolding(uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  const double per_offset = bytes_recorded_ == 0 ? 1.0
                                                 : static_cast<double>(bytes_recorded_) /
                                                       static_cast<double>(offsets_recorded_);
  return static_cast<int64_t>(std::min(static_cast<double>(bytes) / per_offset, 1e15));
}

std::optional<SlotIndex::Snapshot> SlotIndex::TakeSnapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (stretches_.empty() || log_ == TopicId{}) return std::nullopt;
  Snapshot snapshot{log_, stretches_, {}, bytes_recorded_, offsets_recorded_};
  for (const auto& [namespace_id, runs] : runs_) snapshot.runs.emplace(namespace_id, runs);
  return snapshot;
}

bool SlotIndex::Restore(Snapshot snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool empty = stretches_.empty() && runs_.empty();
  const bool same_log = snapshot.log == log_ || (log_ == TopicId{} && log_changes_ == 0);
  if (!empty || !same_log || snapshot.log == TopicId{}) return false;
  log_ = snapshot.log;
  ++log_changes_;  // a scan begun before adds nothing to what is now another index's
  stretches_ = std::move(snapshot.stretches);
  run_count_ = 0;
  for (auto& [namespace_id, runs] : snapshot.runs) {
    run_count_ += runs.size();
    runs_.emplace(namespace_id, std::move(runs));
  }
  bytes_recorded_ = snapshot.bytes_recorded;
  offsets_recorded_ = snapshot.offsets_recorded;
  return true;
}

uint64_t SlotIndex::changes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return changes_;
}

size_t SlotIndex::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return run_count_;
}

std::vector<SlotIndex::Covered> SlotIndex::stretches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stretches_;
}

SlotIndex& SlotIndexes::Of(const Slot& slot) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<SlotIndex>& index = of_[slot];
  if (!index) index = std::make_unique<SlotIndex>();
  return *index;
}

std::vector<std::pair<Slot, SlotIndex*>> SlotIndexes::All() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<Slot, SlotIndex*>> all;
  for (auto& [slot, index] : of_) all.emplace_back(slot, index.get());
  return all;
}

}  // namespace wal
