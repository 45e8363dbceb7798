#include "tests/support/recording_sink.h"

#include <thread>
#include <utility>

namespace wal::testing {

bool RecordingSink::Send(ReadBatch sent) {
  v1::ReadResponse batch = sent.ToResponse();
  if (send_time_ > Clock::duration::zero()) std::this_thread::sleep_for(send_time_);
  std::unique_lock lock(mu_);
  blocked_ = stalled_;
  cv_.notify_all();
  cv_.wait(lock, [this] { return !stalled_ || cancelled_; });
  blocked_ = false;
  // Kept even when cancelled: a test that checks what arrived sees every batch the read sent.
  const auto now = Clock::now();
  if (batch.entries_size() > 0) batch_sizes_.push_back(static_cast<size_t>(batch.entries_size()));
  for (v1::Entry& e : *batch.mutable_entries()) {
    entries_.push_back(std::move(e));
    arrived_.push_back(now);
  }
  cv_.notify_all();
  return !cancelled_;
}

bool RecordingSink::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

void RecordingSink::Finish(absl::Status status) {
  std::lock_guard lock(mu_);
  finished_ = std::move(status);
  cv_.notify_all();
}

void RecordingSink::Stall(bool stalled) {
  std::lock_guard lock(mu_);
  stalled_ = stalled;
  cv_.notify_all();
}

bool RecordingSink::WaitStalled(Clock::duration timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return blocked_; });
}

void RecordingSink::Cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  cv_.notify_all();
}

bool RecordingSink::WaitForEntries(size_t count, Clock::duration timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return finished_.has_value() || entries_.size() >= count; });
  return entries_.size() >= count;
}

std::optional<absl::Status> RecordingSink::WaitFinished(Clock::duration timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return finished_.has_value(); });
  return finished_;
}

absl::StatusOr<std::vector<v1::Entry>> RecordingSink::Wait(Clock::duration timeout) {
  const std::optional<absl::Status> status = WaitFinished(timeout);
  if (!status.has_value()) return absl::DeadlineExceededError("the read did not finish");
  if (!status->ok()) return *status;
  return entries();
}

size_t RecordingSink::received() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

std::vector<size_t> RecordingSink::batch_sizes() const {
  std::lock_guard lock(mu_);
  return batch_sizes_;
}

std::vector<v1::Entry> RecordingSink::entries() const {
  std::lock_guard lock(mu_);
  return entries_;
}

std::vector<uint64_t> RecordingSink::ids() const {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  for (const v1::Entry& e : entries_) out.push_back(e.entry_id());
  return out;
}

std::vector<std::string> RecordingSink::data() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const v1::Entry& e : entries_) out.push_back(e.data());
  return out;
}

std::vector<Clock::time_point> RecordingSink::arrived() const {
  std::lock_guard lock(mu_);
  return arrived_;
}

}  // namespace wal::testing
