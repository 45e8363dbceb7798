#include "server/meta/pruner.h"

#include <algorithm>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/common/deadline.h"
#include "server/kafka/admin.h"
#include "spdlog/spdlog.h"

namespace wal {

Pruner::Pruner(MetaStore* meta, rd_kafka_t* admin, std::vector<Slot> slots,
               std::chrono::milliseconds interval, PruneMode mode, Metrics* metrics,
               FirstEntries first_entries)
    : meta_(meta),
      admin_(admin),
      slots_(std::move(slots)),
      interval_(interval),
      mode_(mode),
      metrics_(metrics),
      first_entries_(std::move(first_entries)),
      thread_([this] { Loop(); }) {}

Pruner::~Pruner() {
  Stop();
  thread_.join();
}

void Pruner::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

bool Pruner::stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

void Pruner::Loop() {
  // Jitter, so that the sidecars sharing a Kafka cluster do not prune in step.
  std::mt19937 rng(std::random_device{}());
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && !logical_) {
    const auto wait = interval_ / 2 + interval_ * (rng() % 1000) / 1000;
    if (cv_.wait_for(lock, wait, [this] { return stop_; })) break;
    lock.unlock();
    if (absl::Status s = RunOnce(); !s.ok() && !absl::IsCancelled(s))
      spdlog::warn("pruning: {}", s.ToString());
    lock.lock();
  }
}

int64_t Pruner::NeededFrom(const Slot& slot, int64_t lowest, int64_t high,
                           Clock::time_point deadline) {
  if (!first_entries_) return lowest;
  auto firsts = first_entries_(slot, high, deadline);
  if (!firsts.ok()) {
    if (!absl::IsCancelled(firsts.status()) && !stopping()) {
      spdlog::warn(
          "pruning {}[{}] only below its lowest first entry id: its namespaces' first entries "
          "could not be read ({})",
          slot.topic, slot.partition, firsts.status().ToString());
    }
    return lowest;
  }
  int64_t needed = high;
  for (const auto& [namespace_id, first] : *firsts) {
    if (first) needed = std::min(needed, *first);
  }
  return needed;
}

absl::Status Pruner::RunOnce() {
  if (logical_) return absl::OkStatus();
  const auto round_deadline = Clock::now() + kRoundTimeout;
  // Each step waits on Kafka for at most kStepTimeout and the round's rest; between steps the
  // round gives up when asked to stop or out of time. With Kafka unreachable that bounds both
  // a round and how long shutdown waits for it.
  const auto step_deadline = [&] { return std::min(round_deadline, Clock::now() + kStepTimeout); };
  const auto give_up = [&]() -> absl::Status {
    if (stopping()) return absl::CancelledError("pruning: walserver is shutting down");
    if (Clock::now() >= round_deadline) {
      return absl::DeadlineExceededError("pruning: the round ran out of time");
    }
    return absl::OkStatus();
  };
  // 1. Every slot's end, before the table is brought up to date (see the header).
  std::vector<std::optional<Watermarks>> marks(slots_.size());
  absl::Status first_error;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (absl::Status s = give_up(); !s.ok()) return s;
    auto m = QueryWatermarks(admin_, slots_[i], step_deadline());
    if (m.ok()) {
      marks[i] = *m;
    } else if (first_error.ok()) {
      first_error = m.status();
    }
  }
  // 2. The table as of now.
  if (absl::Status s = give_up(); !s.ok()) return s;
  if (absl::Status s = meta_->CatchUp(step_deadline()); !s.ok()) return s;
  const auto lowest = meta_->LowestFirstEntryIds();
  // 3. Per slot: record the point, then delete.
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!marks[i]) continue;
    if (absl::Status s = give_up(); !s.ok()) return s;
    const Slot& slot = slots_[i];
    int64_t point = marks[i]->high;
    if (auto it = lowest.find(slot); it != lowest.end() && it->second < point) {
      point = NeededFrom(slot, it->second, point, step_deadline());
    }
    if (point > meta_->PrunedBefore(slot)) {
      if (absl::Status s = meta_->RecordPrune(slot, point, step_deadline()); !s.ok()) {
        if (first_error.ok()) first_error = s;
        continue;
      }
    }
    // Up to this round's point only, recorded now or before (finishing a deletion an earlier
    // round recorded but did not complete): a point recorded higher may be another topic's,
    // one of the slot's name deleted and made again since, whose namespaces needed none of it.
    point = std::min(point, meta_->PrunedBefore(slot));
    if (point <= marks[i]->low) continue;
    auto low = DeleteRecordsBefore(admin_, slot, point, step_deadline());
    if (!low.ok() && absl::IsFailedPrecondition(low.status())) {
      ++metrics_->prune_refusals;
      if (mode_ == PruneMode::kAuto) {
        logical_ = true;
        metrics_->prune_logical = 1;
        spdlog::warn(
            "pruning: {}. --prune_mode=auto: pruning logically from now on: truncated entries "
            "stay unreadable, but their records stay in Kafka and disk use only grows "
            "(--prune_mode=logical says so from the start)",
            std::string(low.status().message()));
        return absl::OkStatus();
      }
    }
    if (!low.ok()) {
      if (first_error.ok()) first_error = low.status();
      continue;
    }
    metrics_->pruned_records += static_cast<uint64_t>(*low - marks[i]->low);
    spdlog::info("pruned {}[{}] below offset {}", slot.topic, slot.partition, *low);
  }
  return first_error;
}

}  // namespace wal
