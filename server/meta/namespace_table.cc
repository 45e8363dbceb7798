#include "server/meta/namespace_table.h"

#include <algorithm>

namespace wal {

using meta::v1::NamespaceRecord;

namespace {

std::vector<Fence> FencesOf(const NamespaceRecord& r) {
  std::vector<Fence> out;
  for (const auto& f : r.fences()) out.push_back(Fence{f.epoch(), f.offset()});
  return out;
}

// Adds `more` to `fences` (one fence per epoch), keeps them in offset order, and drops those
// below `truncated_before` except the one of the highest epoch: a read never starts below
// truncated_before, and needs only the highest epoch fenced before its start. (Fences of two
// acquisitions through different servers can land out of epoch order.)
void MergeFences(const std::vector<Fence>& more, int64_t truncated_before,
                 std::vector<Fence>* fences) {
  for (const Fence& f : more) {
    const bool known = std::any_of(fences->begin(), fences->end(),
                                   [&](const Fence& g) { return g.epoch == f.epoch; });
    if (!known) fences->push_back(f);
  }
  std::sort(fences->begin(), fences->end(), [](const Fence& a, const Fence& b) {
    return std::make_pair(a.offset, a.epoch) < std::make_pair(b.offset, b.epoch);
  });
  size_t below = 0;
  size_t highest = 0;  // among those below
  while (below < fences->size() && (*fences)[below].offset < truncated_before) {
    if ((*fences)[below].epoch >= (*fences)[highest].epoch) highest = below;
    ++below;
  }
  if (below > 1) {
    const Fence keep = (*fences)[highest];
    fences->erase(fences->begin(), fences->begin() + below);
    fences->insert(fences->begin(), keep);
  }
}

// Whether `r` alone would rebuild `state` (what compaction may leave of a key).
bool CarriesState(const NamespaceRecord& r, const NamespaceState& state) {
  if (!state.SameAssignment(r) || r.truncated_before() != state.truncated_before ||
      r.epoch() != state.epoch) {
    return false;
  }
  std::vector<Fence> fences;
  MergeFences(FencesOf(r), state.truncated_before, &fences);
  return fences == state.fences;
}

}  // namespace

NamespaceTable::NamespaceTable(std::vector<Slot> slots)
    : slots_(std::move(slots)), load_(slots_.size(), 0) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    slot_index_[slots_[i]] = i;
  }
}

void NamespaceTable::CountLoad(const NamespaceState& state, int delta) {
  if (state.deleted) return;
  live_ += delta;
  auto it = slot_index_.find(state.slot);
  // A slot outside our list: another server was configured with more slots.
  if (it != slot_index_.end()) load_[it->second] += delta;
}

void NamespaceTable::Establish(Row& row, uint64_t id, const NamespaceRecord& r,
                               int64_t meta_offset) {
  CountLoad(row.state, -1);
  row.state.namespace_id = id;
  row.state.slot = Slot{r.topic(), r.partition()};
  row.state.start_offset = r.start_offset();
  row.state.truncated_before = r.truncated_before();
  row.state.deleted = r.deleted() || r.kind() == NamespaceRecord::DELETE;
  row.state.meta_offset = meta_offset;
  row.state.epoch = r.epoch();
  row.state.epoch_meta_offset = meta_offset;
  row.state.fences.clear();
  MergeFences(FencesOf(r), row.state.truncated_before, &row.state.fences);
  row.latest_record_stale = false;
  CountLoad(row.state, +1);
}

ApplyOutcome NamespaceTable::Apply(uint64_t id, const NamespaceRecord& r, int64_t meta_offset) {
  auto [it, absent] = rows_.try_emplace(id);
  Row& row = it->second;
  if (absent) {
    // Any record of an unknown namespace carries its whole state: after compaction the CREATE
    // may be gone and a later TRUNCATE or RESTATE be all that is left.
    row.state.deleted = true;  // not counted yet
    Establish(row, id, r, meta_offset);
    return ApplyOutcome::kCreated;
  }
  if (r.kind() == NamespaceRecord::CREATE) {
    if (row.state.deleted) {
      // Created again. A creator that had not read every acquisition of the earlier
      // incarnations proposed too low an epoch: every server raises it alike, and the record,
      // which compaction may leave alone, is restated.
      const uint64_t earlier_epoch = row.state.epoch;
      Establish(row, id, r, meta_offset);
      StartAbove(earlier_epoch, &row.state);
      row.latest_record_stale = !CarriesState(r, row.state);
      return ApplyOutcome::kCreated;
    }
    if (row.state.SameAssignment(r)) return ApplyOutcome::kIgnored;
    row.latest_record_stale = true;
    return ApplyOutcome::kLostRace;
  }
  // Every other kind applies only to the assignment it names, and only raises: truncation,
  // epoch and fences merge, so records written from stale views never undo a change.
  if (row.state.deleted) {
    // A change after the deletion, or a second deletion with a lower epoch (written from a view
    // that missed an acquisition, landing after an up-to-date one): compaction would keep it.
    const bool deletion = r.kind() == NamespaceRecord::DELETE || r.deleted();
    row.latest_record_stale = !deletion || r.epoch() < row.state.epoch;
    return row.latest_record_stale ? ApplyOutcome::kStaleAfterDelete : ApplyOutcome::kIgnored;
  }
  if (!row.state.SameAssignment(r) ||
      (r.incarnation() != 0 && r.incarnation() != row.state.meta_offset)) {
    row.latest_record_stale = true;
    return ApplyOutcome::kIgnored;
  }
  NamespaceState& state = row.state;
  bool changed = false;
  if (r.truncated_before() > state.truncated_before) {
    state.truncated_before = r.truncated_before();
    changed = true;
  }
  if (r.epoch() > state.epoch) {
    state.epoch = r.epoch();
    state.epoch_meta_offset = meta_offset;
    changed = true;
  }
  const std::vector<Fence> before = state.fences;
  MergeFences(FencesOf(r), state.truncated_before, &state.fences);
  if (state.fences != before) changed = true;
  if (r.kind() == NamespaceRecord::DELETE || r.deleted()) {
    CountLoad(state, -1);
    state.deleted = true;
    // A deletion written from a view that missed an acquisition: compaction would keep its lower
    // epoch, which a later incarnation must start above. Restated like a stale change.
    row.latest_record_stale = r.epoch() < state.epoch;
    return row.latest_record_stale ? ApplyOutcome::kStaleAfterDelete : ApplyOutcome::kUpdated;
  }
  row.latest_record_stale = !CarriesState(r, state);
  return changed ? ApplyOutcome::kUpdated : ApplyOutcome::kIgnored;
}

std::optional<NamespaceState> NamespaceTable::Get(uint64_t id) const {
  auto it = rows_.find(id);
  if (it == rows_.end() || it->second.state.deleted) return std::nullopt;
  return it->second.state;
}

std::optional<int64_t> NamespaceTable::TruncatedBefore(uint64_t id, int64_t incarnation) const {
  auto it = rows_.find(id);
  if (it == rows_.end() || it->second.state.deleted ||
      it->second.state.meta_offset != incarnation) {
    return std::nullopt;
  }
  return it->second.state.truncated_before;
}

uint64_t NamespaceTable::EarlierEpoch(uint64_t id) const {
  auto it = rows_.find(id);
  return it != rows_.end() && it->second.state.deleted ? it->second.state.epoch : 0;
}

void StartAbove(uint64_t earlier_epoch, NamespaceState* state) {
  if (earlier_epoch == 0 || state->epoch > earlier_epoch) return;
  state->epoch = earlier_epoch + 1;
  // Fences apply to records after their offset: this one to every record from the start on.
  MergeFences({Fence{state->epoch, state->start_offset - 1}}, state->truncated_before,
              &state->fences);
}

std::optional<AppendRoute> NamespaceTable::Route(uint64_t id) const {
  auto it = rows_.find(id);
  if (it == rows_.end() || it->second.state.deleted) return std::nullopt;
  return AppendRoute{it->second.state.slot, it->second.state.epoch};
}

std::vector<NamespaceState> NamespaceTable::List(uint64_t after, size_t limit) const {
  std::vector<NamespaceState> out;
  for (auto it = rows_.upper_bound(after); it != rows_.end() && out.size() < limit; ++it) {
    if (!it->second.state.deleted) out.push_back(it->second.state);
  }
  return out;
}

std::vector<NamespaceState> NamespaceTable::InSlot(const Slot& slot) const {
  std::vector<NamespaceState> out;
  for (const auto& [id, row] : rows_) {
    if (!row.state.deleted && row.state.slot == slot) out.push_back(row.state);
  }
  return out;
}

std::map<Slot, int64_t> NamespaceTable::LowestFirstEntryIds() const {
  std::map<Slot, int64_t> lowest;
  for (const auto& [id, row] : rows_) {
    if (row.state.deleted) continue;
    const int64_t first = row.state.first_entry_id();
    auto [it, fresh] = lowest.try_emplace(row.state.slot, first);
    if (!fresh) it->second = std::min(it->second, first);
  }
  return lowest;
}

std::vector<size_t> NamespaceTable::LoadPerSlot() const { return load_; }

const Slot& NamespaceTable::LeastLoadedSlot() const {
  return slots_[std::min_element(load_.begin(), load_.end()) - load_.begin()];
}

std::vector<NamespaceState> NamespaceTable::NeedingRestate() const {
  std::vector<NamespaceState> out;
  for (const auto& [id, row] : rows_) {
    if (row.latest_record_stale && !row.state.deleted) out.push_back(row.state);
  }
  return out;
}

std::optional<NamespaceState> NamespaceTable::DeletedButStale(uint64_t id) const {
  auto it = rows_.find(id);
  if (it == rows_.end() || !it->second.state.deleted || !it->second.latest_record_stale) {
    return std::nullopt;
  }
  return it->second.state;
}

bool NamespaceTable::LatestRecordStale(uint64_t id) const {
  auto it = rows_.find(id);
  return it != rows_.end() && !it->second.state.deleted && it->second.latest_record_stale;
}

NamespaceRecord MakeRecord(NamespaceRecord::Kind kind, const NamespaceState& state,
                           const std::string& writer) {
  NamespaceRecord r;
  r.set_version(1);
  r.set_kind(kind);
  r.set_topic(state.slot.topic);
  r.set_partition(state.slot.partition);
  r.set_start_offset(state.start_offset);
  r.set_truncated_before(state.truncated_before);
  r.set_deleted(state.deleted);
  r.set_writer(writer);
  r.set_epoch(state.epoch);
  for (const Fence& f : state.fences) {
    auto* out = r.add_fences();
    out->set_epoch(f.epoch);
    out->set_offset(f.offset);
  }
  return r;
}

}  // namespace wal
